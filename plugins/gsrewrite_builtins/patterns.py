"""Built-in patterns: the files under ``patterns/`` and the named checks/computations they use."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from gsrewrite.plugin_api import hookimpl

if TYPE_CHECKING:
    from gsrewrite.plugin_api import PatternRegistry


@hookimpl
def gsrewrite_register_patterns(registry: PatternRegistry) -> None:
    # imported here: loading the plugin (every CLI start) must not import the engine
    from gsrewrite_builtins import (
        attention,
        attention_mask,
        embeddings,
        grouped_attention,
        linear,
        nan_guard,
        pattern_checks,
        pattern_computations,
        rotary,
    )

    for module in (pattern_checks, pattern_computations, attention, attention_mask, embeddings,
                   grouped_attention, linear, nan_guard, rotary):
        for name, check in getattr(module, "CHECKS", {}).items():
            registry.add_check(name, check)
        for name, compute in getattr(module, "COMPUTATIONS", {}).items():
            registry.add_compute(name, compute)
    registry.add_directory(resources.files("gsrewrite_patterns"))
