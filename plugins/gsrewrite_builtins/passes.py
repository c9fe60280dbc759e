"""Built-in simplify passes, registered through ``gsrewrite_register_passes`` like any plugin's.

The Python passes live in ``gsrewrite/simplifier/passes/`` (one module each); ``fuse-conv-bn`` and
``fuse-matmul-add`` are pattern families of ``patterns/`` run by the pattern engine, with the named checks and
computations of the built-in pattern package.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

from gsrewrite.plugin_api import hookimpl
from gsrewrite_builtins.patterns import PACKAGE

if TYPE_CHECKING:
    from gsrewrite.plugin_api import PassRegistry

#: Pattern passes: (name, description, pattern file in ``patterns/``, the built-in pass it runs before).
PATTERN_PASSES = [
    ("fuse-conv-bn", "Fold an inference BatchNormalization into the preceding Conv's weight and bias.",
     "conv_bn/conv-bn.toml", "eliminate-dead-code"),
    ("fuse-matmul-add", "MatMul of a 2-D input by a constant 2-D weight, plus a constant bias: one Gemm.",
     "matmul_add/matmul-add.toml", "eliminate-dead-code"),
]


def _pattern_functions() -> tuple[dict[str, Any], dict[str, Any]]:
    from gsrewrite.plugin_api import PatternRegistry

    registry = PatternRegistry()
    registry.add_functions(PACKAGE)
    return registry.checks, registry.computes


@hookimpl
def gsrewrite_register_passes(registry: PassRegistry) -> None:
    # imported here: loading the plugin (every CLI start) must not import the engine
    from gsrewrite.plugin_api import PatternPass, builtin_passes

    passes = builtin_passes()
    for name, description, file, before in PATTERN_PASSES:
        at = next(i for i, p in enumerate(passes) if p.name == before)
        passes.insert(at, PatternPass(name, description, resources.files(PACKAGE) / file, _pattern_functions))
    for pass_ in passes:
        registry.add(pass_)
