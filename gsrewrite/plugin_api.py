"""The public surface for plugin authors: everything a plugin (built-in or third-party) imports from gsrewrite.

Plugins import from here, not from engine/graph/pipelines modules, whose layout may change::

    from gsrewrite.plugin_api import CheckFailed, Match, hookimpl, reads

Names are resolved on first use, so that importing a plugin (every CLI start) stays cheap.
"""

from __future__ import annotations

from gsrewrite import _lazy

#: public name -> module holding it ("module:attribute" when the facade renames it)
_LAZY: dict[str, str] = {
    "hookimpl": "gsrewrite.hookspecs",
    "CheckFailed": "gsrewrite.engine.match",
    "Match": "gsrewrite.engine.match",
    "legalize": "gsrewrite.engine.legalize",
    "constant_values": "gsrewrite.graph.core",
    "PatternRegistry": "gsrewrite.patterns.registry",
    "reads": "gsrewrite.patterns.contract",
    "PassRegistry": "gsrewrite.simplifier.registry",
    "PatternPass": "gsrewrite.pipelines.pattern_pass",
    "builtin_passes": "gsrewrite.simplifier.passes",
    "GsrewriteError": "gsrewrite.errors",
    "PatternError": "gsrewrite.errors",
    "UsageError": "gsrewrite.errors",
    "generated_inputs": "gsrewrite.validation.input_sets",
    "decoder_phases": "gsrewrite.validation.phases",
    "run_once": "gsrewrite.validation.runner",
    "model_session": "gsrewrite.validation.runner",
    "load_npz_files": "gsrewrite.validation.npz_files",
    "profile_op": "gsrewrite.plugin_hooks",  # the plugins' answer for one node's cost (a plugin's own command)
    "load_model": "gsrewrite.model_io",
    "save_model": "gsrewrite.model_io",
    "tensor_values": "gsrewrite.model_io.weights",
    "materialized": "gsrewrite.model_io.weights",
    # a write of a temp file that runs out of room: one line naming the folder (NoSpaceError), is_full(exc)
    **dict.fromkeys(("writing", "is_full"), "gsrewrite.model_io.disk_space"),
    "copy_fields": "gsrewrite.graph.core",  # every set field of one protobuf message into another, but some
    **dict.fromkeys(("DimValue", "dim_of", "ceil_div", "floor_div", "sym", "dim_max"), "gsrewrite.shapes.symdim"),
    "dim_mul": "gsrewrite.shapes.symdim:mul",
    "dim_add": "gsrewrite.shapes.symdim:add",
    **dict.fromkeys(("CompressionStrategy", "GraphPass", "OpCost", "OpProfiler", "ShapeHandler", "TensorType",
                     "Tolerance"), "gsrewrite.protocols"),
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = _lazy.facade(__name__, _LAZY, __all__)
