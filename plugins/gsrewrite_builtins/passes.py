"""Built-in simplify passes, registered through ``gsrewrite_register_passes`` like any plugin's.

The Python passes live in ``gsrewrite/simplifier/passes/`` (one module each); ``fold-conv-affine``,
``fuse-conv-bn`` and ``fuse-matmul-add`` are pattern families of ``patterns/`` run by the pattern engine, with
the named checks and computations of the built-in pattern package.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import TYPE_CHECKING, Any

from gsrewrite.plugin_api import hookimpl
from gsrewrite_builtins.patterns import PACKAGE

if TYPE_CHECKING:
    from gsrewrite.plugin_api import PassRegistry

#: Pattern passes: (name, description, pattern file in ``patterns/``, the built-in pass it runs before).
PATTERN_PASSES = [
    ("fold-conv-affine", "Fold per-channel constant Mul/Add after a Conv or ConvTranspose into its weight and bias.",
     "conv_affine/conv-affine.toml", "merge-constant-arith"),
    ("fuse-conv-bn", "Fold an inference BatchNormalization into the preceding Conv's weight and bias.",
     "conv_bn/conv-bn.toml", "eliminate-dead-code"),
    ("fuse-matmul-add", "MatMul of a 2-D input by a constant 2-D weight, plus a constant bias: one Gemm.",
     "matmul_add/matmul-add.toml", "eliminate-dead-code"),
]


@functools.cache
def _pattern_functions(family: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The named checks and computations a built-in family's patterns may use: its own and the shared ones (only
    those modules are imported: the attention proofs cost a CNN's simplify nothing)."""
    from gsrewrite.plugin_api import PatternRegistry

    registry = PatternRegistry()
    registry.add_functions(f"{PACKAGE}._shared")
    if (resources.files(PACKAGE) / family / "__init__.py").is_file():
        registry.add_functions(f"{PACKAGE}.{family}")
    return registry.checks, registry.computes


@hookimpl
def gsrewrite_register_passes(registry: PassRegistry) -> None:
    # imported here: loading the plugin (every CLI start) must not import the engine
    from gsrewrite.plugin_api import PatternPass, builtin_passes

    passes = builtin_passes()
    for name, description, file, before in PATTERN_PASSES:
        at = next(i for i, p in enumerate(passes) if p.name == before)
        family = file.partition("/")[0]
        passes.insert(at, PatternPass(name, description, resources.files(PACKAGE) / file,
                                      functools.partial(_pattern_functions, family)))
    for pass_ in passes:
        registry.add(pass_)
