"""gsrewrite: a plugin-based, validated rewrite engine for ONNX models.

The public API is small and imported lazily (onnxruntime is slow to import)::

    import gsrewrite
    model = gsrewrite.load_model("model.onnx")
    result = gsrewrite.apply(model, patterns=["layernorm", "gelu"])
    gsrewrite.save_model(result.model, "out.onnx")
"""

from __future__ import annotations

import importlib
from typing import Any

from gsrewrite._version import __version__

# public name -> module that defines it
_LAZY = {
    "load_model": "gsrewrite.model_io",
    "save_model": "gsrewrite.model_io",
    "validate": "gsrewrite.validation",
    "ValidationReport": "gsrewrite.validation",
    "model_info": "gsrewrite.info",
    "apply": "gsrewrite.pipelines",
    "optimize": "gsrewrite.pipelines",
    "save_genai": "gsrewrite.pipelines.genai",
    "RewriteResult": "gsrewrite.pipelines",
    "ValidationOptions": "gsrewrite.pipelines",
    "RewriteOptions": "gsrewrite.pipelines",
    "CompressOptions": "gsrewrite.pipelines",
    "SimplifyLimits": "gsrewrite.pipelines",
    "load_pattern": "gsrewrite.patterns",
    "get_plugin_manager": "gsrewrite.plugin_manager",
    "simplify": "gsrewrite.pipelines",
    "extract": "gsrewrite.pipelines.extract",
    "infer_shapes": "gsrewrite.profiling.analysis",
    "compress": "gsrewrite.pipelines.compress",
    "bench": "gsrewrite.pipelines.bench",
    "profile": "gsrewrite.profiling.analysis",
    "plan_memory": "gsrewrite.profiling.analysis",
    "write_report": "gsrewrite.pipelines.reported",
    "report_data": "gsrewrite.pipelines.reported",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gsrewrite' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
