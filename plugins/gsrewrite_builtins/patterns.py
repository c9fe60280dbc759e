"""Built-in patterns: the files under ``patterns/`` and the named checks/computations they use."""

from __future__ import annotations

from importlib import resources

from gsrewrite.hookspecs import hookimpl
from gsrewrite.patterns.registry import PatternRegistry
from gsrewrite_builtins import pattern_checks, pattern_computations


@hookimpl
def gsrewrite_register_patterns(registry: PatternRegistry) -> None:
    for name, check in pattern_checks.CHECKS.items():
        registry.add_check(name, check)
    for name, compute in pattern_computations.COMPUTATIONS.items():
        registry.add_compute(name, compute)
    registry.add_directory(resources.files("gsrewrite_patterns"))
