"""gsrewrite: a plugin-based, validated rewrite engine for ONNX models.

The public API is small and imported lazily (onnxruntime is slow to import)::

    import gsrewrite
    model = gsrewrite.load_model("model.onnx")
    result = gsrewrite.apply(model, patterns=["layernorm", "gelu"])
    gsrewrite.save_model(result.model, "out.onnx")
"""

from __future__ import annotations

from gsrewrite import _lazy
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
    "set_memory_release": "gsrewrite.stages",
}

__all__ = ["__version__", *_LAZY]

# not kept on the module: each access reads the defining module's name as it is now
__getattr__, __dir__ = _lazy.facade(__name__, _LAZY, __all__, keep=False)
