"""The simplifier: small graph passes, run to a fixed point by ``gsrewrite.simplify`` (:mod:`gsrewrite.pipelines`).

::

    import gsrewrite
    result = gsrewrite.simplify("model.onnx", input_shapes={"batch": 1})
    print(result.before.nodes, "->", result.after.nodes, result.counts)
    gsrewrite.save_model(result.model, "model.simple.onnx")

The passes are registered by plugins through ``gsrewrite_register_passes`` (the built-ins in
``plugins/gsrewrite_builtins/passes.py``); ``gsrewrite passes list`` shows them. See ``docs/simplify.md``.
"""

from __future__ import annotations

from gsrewrite.protocols import PassResult
from gsrewrite.simplifier.extract import extract_constant, extract_node
from gsrewrite.simplifier.passes.base import SimplifyOptions, SimplifyPass
from gsrewrite.simplifier.registry import PassRegistry, default_pass_registry
from gsrewrite.simplifier.result import ModelStats, SimplifyResult

__all__ = [
    "ModelStats",
    "PassRegistry",
    "PassResult",
    "SimplifyOptions",
    "SimplifyPass",
    "SimplifyResult",
    "default_pass_registry",
    "extract_constant",
    "extract_node",
]
