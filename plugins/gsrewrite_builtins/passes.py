"""Built-in simplify passes, registered through ``gsrewrite_register_passes`` like any plugin's.

The Python passes live in ``gsrewrite/simplifier/passes/`` (one module each); ``fuse-conv-bn`` is the
``conv-bn`` pattern file run by the pattern engine, with the named checks and computations of this plugin.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

from gsrewrite.plugin_api import hookimpl

if TYPE_CHECKING:
    from gsrewrite.plugin_api import PassRegistry

#: Pattern passes: (name, description, pattern file in ``patterns/``); they run before dead-code elimination.
PATTERN_PASSES = [
    ("fuse-conv-bn", "Fold an inference BatchNormalization into the preceding Conv's weight and bias.",
     "conv-bn.toml"),
    ("fuse-matmul-add", "MatMul of a 2-D input by a constant 2-D weight, plus a constant bias: one Gemm.",
     "matmul-add.toml"),
]


def _pattern_functions() -> tuple[dict[str, Any], dict[str, Any]]:
    from gsrewrite_builtins import pattern_checks, pattern_computations

    return pattern_checks.CHECKS, pattern_computations.COMPUTATIONS


@hookimpl
def gsrewrite_register_passes(registry: PassRegistry) -> None:
    # imported here: loading the plugin (every CLI start) must not import the engine
    from gsrewrite.plugin_api import PatternPass, builtin_passes

    passes = builtin_passes()
    before = next(i for i, p in enumerate(passes) if p.name == "eliminate-dead-code")
    patterns = [PatternPass(name, description, resources.files("gsrewrite_patterns") / file, _pattern_functions)
                for name, description, file in PATTERN_PASSES]
    for pass_ in passes[:before] + patterns + passes[before:]:
        registry.add(pass_)
