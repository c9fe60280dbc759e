"""The one shape-inference entry point, :func:`infer_shapes`: ONNX's inference and the plugin shape handlers
(:func:`gsrewrite.shapes.handlers.onnx_and_handlers`), then, for the main-graph tensors still untyped, the symbolic
walk (:mod:`gsrewrite.shapes.walk`), whose expressions become ``dim_param`` text. Graph import,
``extract``, validation's memory estimate and (through graph import) simplify's shape folding call it; the
analysis commands call the symbolic walk directly for the expressions themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import onnx

from gsrewrite.shapes.handlers import onnx_and_handlers
from gsrewrite.shapes.walk import infer_symbolic, value_info

log = logging.getLogger(__name__)


def infer_shapes(model: onnx.ModelProto, *, data_prop: bool = True) -> onnx.ModelProto:
    """``model`` with the types ONNX inference and the shape handlers find, completed by the symbolic walk: a
    main-graph tensor ONNX left untyped gets the walk's type, and a dim ONNX left unknown (``unk__N`` or empty)
    gets the walk's size or expression. The input model is never modified."""
    inferred = onnx_and_handlers(model, data_prop=data_prop)
    missing, vague = _gaps(inferred)
    if not missing and not vague:
        return inferred
    try:
        walked = infer_symbolic(inferred, onnx_dims=True)  # (ONNX's static dims win over the rules' expressions)
    except Exception as exc:
        log.info("symbolic shape walk failed (%s); keeping ONNX's types", exc)
        return inferred
    outputs = {o.name for o in inferred.graph.output}
    for name in missing:
        info = value_info(walked, name)
        if info is not None and name not in outputs:
            inferred.graph.value_info.append(info)
    for vi in vague:
        _sharpen(vi, walked.shape(vi.name))
    return inferred


def _unknown(dim: onnx.TensorShapeProto.Dimension) -> bool:
    return not dim.HasField("dim_value") and (not dim.dim_param or dim.dim_param.startswith("unk__"))


def _gaps(model: onnx.ModelProto) -> tuple[list[str], list[onnx.ValueInfoProto]]:
    """Main-graph node outputs without a type, and value_infos (and outputs) with an unknown dim."""
    graph = model.graph
    typed: dict[str, onnx.ValueInfoProto] = {}
    for vi in (*graph.value_info, *graph.output, *graph.input):
        if vi.type.tensor_type.elem_type and vi.type.tensor_type.HasField("shape"):
            typed.setdefault(vi.name, vi)
    produced = [name for node in graph.node for name in node.output if name]
    missing = [name for name in produced if name not in typed]
    vague = [typed[name] for name in produced if name in typed
             and any(_unknown(d) for d in typed[name].type.tensor_type.shape.dim)]
    return missing, vague


def _sharpen(vi: onnx.ValueInfoProto, shape: Sequence[object] | None) -> None:
    dims = vi.type.tensor_type.shape.dim
    if shape is None or len(shape) != len(dims):
        return
    for dim, known in zip(dims, shape, strict=True):
        if not _unknown(dim) or known is None:
            continue
        if isinstance(known, int):
            dim.Clear()
            dim.dim_value = known
        else:
            text = str(known)
            if not text.startswith("unk__"):
                dim.Clear()
                dim.dim_param = text
