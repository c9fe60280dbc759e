"""Built-in patterns: the files under ``patterns/`` and the named checks/computations they use."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from gsrewrite.hookspecs import hookimpl

if TYPE_CHECKING:
    from gsrewrite.patterns.registry import PatternRegistry


@hookimpl
def gsrewrite_register_patterns(registry: PatternRegistry) -> None:
    # imported here: loading the plugin (every CLI start) must not import the engine
    from gsrewrite_builtins import pattern_checks, pattern_computations

    for name, check in pattern_checks.CHECKS.items():
        registry.add_check(name, check)
    for name, compute in pattern_computations.COMPUTATIONS.items():
        registry.add_compute(name, compute)
    registry.add_directory(resources.files("gsrewrite_patterns"))
