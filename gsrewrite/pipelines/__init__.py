"""The orchestration above the engine (pattern rewrites) and the simplifier (graph passes).

``apply`` (pattern rewrites), ``simplify`` (cleanup passes) and ``optimize`` (both), each validated by onnxruntime
with one validate-and-bisect loop (:mod:`gsrewrite.pipelines.bisect`): a step (pattern or pass) whose result
disagrees with the original, or that onnxruntime cannot load or run, is dropped and reported. The engine and the
simplifier never import this package; it imports both.

The functions are imported here on purpose: ``gsrewrite.pipelines.apply`` names the function, not the module
(``importlib.import_module("gsrewrite.pipelines.apply")`` reaches the module).
"""

from __future__ import annotations

from gsrewrite.pipelines.apply import RewriteResult, apply
from gsrewrite.pipelines.optimize import optimize
from gsrewrite.pipelines.options import CompressOptions, RewriteOptions, ValidationOptions
from gsrewrite.pipelines.simplify import SimplifyLimits, simplify

__all__ = ["CompressOptions", "RewriteOptions", "RewriteResult", "SimplifyLimits", "ValidationOptions", "apply",
           "optimize", "simplify"]
