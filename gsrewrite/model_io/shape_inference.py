"""ONNX shape inference made safe for hostile models: one entry point for every caller (the graph import,
validation's memory estimate).

onnx 1.23's inference has two failure modes on small hostile models: data propagation allocates per element of
the 1-D tensors it meets (a declared ``[2**34]`` dim, a ConstantOfShape to 2**40), and a negative declared dim
(paddle2onnx writes -1 for dynamic ones) aborts the process in a Slice. :func:`infer_shapes` avoids both.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import onnx

from gsrewrite.model_io.functions import MAX_EXPANDED_NODES, expanded_nodes
from gsrewrite.model_io.graph_walk import iter_graphs
from gsrewrite.model_io.saving import over_protobuf_limit

log = logging.getLogger(__name__)

#: onnx.shape_inference works on serialized protos limited to 2 GB.
_INFERENCE_LIMIT = 2**31 - 1
#: ONNX data propagation allocates per element of the 1-D tensors that reach its arithmetic propagators (onnx
#: 1.23: ``Add(x, y)`` with ``x`` declared ``[2**34]`` needs tens of GB), so it is only used when no declared dim
#: and no operand that sets a size (ConstantOfShape's shape, Range's limit, ...) is beyond this.
_DATA_PROP_LIMIT = 1 << 22
#: Ops whose constant operands (all, or those at the listed input positions) set an output size, drive a loop in
#: data propagation (Slice's steps: ``step = 2**40`` makes onnx 1.23 loop past the end and exhaust memory), or
#: scale shape values (``Mul(Shape(x), 2**30)``; integer operands only, see :func:`_largest`).
_SIZE_OPERANDS: dict[str, tuple[int, ...] | None] = {  # None: every input
    **dict.fromkeys(("ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "OneHot",
                     "CenterCropPad", "Reshape")), "Slice": (4,), "Mul": (0, 1), "Add": (0, 1)}
_ARITHMETIC = frozenset({"Mul", "Add"})


def infer_shapes(model: onnx.ModelProto, *, data_prop: bool = True) -> onnx.ModelProto:
    """ONNX shape inference, with data propagation unless ``data_prop`` is False; on any failure the model is
    returned unchanged.

    Data propagation is used only when it is safe (:func:`data_propagation_is_safe`), both for the model and
    for what plain inference finds (a chain of Concats doubling a constant to 2**32 elements is only seen
    there); plain inference costs about a millisecond on a transformer export.
    """
    if over_protobuf_limit(model, _INFERENCE_LIMIT - 1):
        log.info("model is over 2 GB: skipping in-memory shape inference")
        return model
    if model.functions and expanded_nodes(model) is None:
        log.info("the local functions are recursive or expand past %d nodes: skipping shape inference",
                 MAX_EXPANDED_NODES)
        return model
    model = _negative_dims_cleared(model)
    try:
        plain = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=False)
        if not data_prop:
            return plain
        if not data_propagation_is_safe(model) or not data_propagation_is_safe(plain):
            log.info("a dim or size operand is over %d: shape inference without data propagation",
                     _DATA_PROP_LIMIT)
            return plain
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:  # inference is an aid, never a requirement
        log.info("shape inference failed (%s); continuing without inferred shapes", str(exc).splitlines()[0])
        return model


def _negative_dims_cleared(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy in which negative declared dims (paddle2onnx writes -1 for dynamic ones) are
    unknown dims: ONNX inference takes them as sizes and aborts the process (onnx 1.23, Slice of a -1 dim)."""
    infos = [info for graph, _ in iter_graphs(model) for info in (*graph.input, *graph.output, *graph.value_info)]
    if not any(d.dim_value < 0 for info in infos for d in info.type.tensor_type.shape.dim):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for graph, _ in iter_graphs(copy):
        for info in (*graph.input, *graph.output, *graph.value_info):
            for dim in info.type.tensor_type.shape.dim:
                if dim.dim_value < 0:
                    dim.Clear()
    return copy


def data_propagation_is_safe(model: onnx.ModelProto) -> bool:
    """False when ONNX data propagation could meet a huge vector: a declared dim, or a small constant read by
    an op that sets an output size, over :data:`_DATA_PROP_LIMIT` (negative dims count as unknown)."""
    for graph, _ in iter_graphs(model):
        for info in (*graph.input, *graph.output, *graph.value_info):
            if any(d.dim_value > _DATA_PROP_LIMIT for d in info.type.tensor_type.shape.dim):
                return False
        operands = _size_operands(graph)
        if not operands:
            continue
        constants = [(t, operands[t.name]) for t in graph.initializer if t.name in operands]
        constants += [(a.t, operands[n.output[0]]) for n in graph.node if n.op_type == "Constant" and n.output
                      and n.output[0] in operands for a in n.attribute if a.name == "value"]
        if any(_largest(t, integers_only) > _DATA_PROP_LIMIT for t, integers_only in constants):
            return False
    return True


def _size_operands(graph: onnx.GraphProto) -> dict[str, bool]:
    """Names read where they may set a size -> whether only their integer values matter (Mul/Add only)."""
    operands: dict[str, bool] = {}
    for node in graph.node:
        positions = _SIZE_OPERANDS.get(node.op_type, ())
        for i, name in enumerate(node.input):
            if name and (positions is None or i in positions):
                operands[name] = operands.get(name, True) and node.op_type in _ARITHMETIC
    return operands


def _largest(tensor: onnx.TensorProto, integers_only: bool = False) -> float:
    """The largest magnitude in a small numeric constant (0 for large, external or non-numeric ones, and for
    floats when ``integers_only``: Mul/Add float constants are data, such as masks of -3.4e38)."""
    if math.prod(tensor.dims) > 64 or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return 0.0
    try:
        values = onnx.numpy_helper.to_array(tensor)
    except Exception:  # malformed: the loader reports it elsewhere
        return 0.0
    if values.dtype.kind not in ("biu" if integers_only else "biuf") or not values.size:
        return 0.0
    magnitude = float(np.max(np.abs(values.astype(np.float64))))
    return magnitude if not np.isnan(magnitude) else 0.0
