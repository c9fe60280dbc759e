"""ONNX's inference (made safe for hostile models, in :mod:`gsrewrite.model_io.shape_inference`) and the
``gsrewrite_infer_shape`` hook for the nodes ONNX does not know (custom domains: onnxruntime's contrib ops, a
plugin's own ops): the first stage of the one entry point, :func:`gsrewrite.shapes.inference.infer_shapes`.

* :func:`onnx_and_handlers` (a model): ONNX inference; then every plugin handler is asked about the main graph's
  custom-domain nodes whose outputs are still untyped, their answers become ``value_info``, and ONNX inference
  runs again so that the types flow into the standard ops after them (a few rounds at most).
* :func:`annotate_node` (a graph node): the handlers' answer for one node, filling only untyped outputs (the
  rewrite engine calls it for the contrib ops a replacement creates).

A handler gets the node (onnx-graphsurgeon) and a :class:`ShapeContext`; it returns one ``(dtype, shape)`` per
output (``None`` for an output it cannot type) or ``None`` when the op is not its own. A type the model already
has is never changed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper

from gsrewrite import plugin_hooks
from gsrewrite.model_io.shape_inference import infer_shapes as onnx_infer_shapes

log = logging.getLogger(__name__)

STANDARD_DOMAINS = frozenset({"", "ai.onnx"})
#: rounds of handlers + ONNX inference (a chain custom -> standard -> custom needs one per custom op)
MAX_ROUNDS = 4
#: constant inputs up to this many elements are given to handlers as values
SMALL_CONSTANT = 1024


@dataclass
class ShapeContext:
    """What a handler may ask besides the node: the model's opsets and the values of small constants."""

    opsets: dict[str, int] = field(default_factory=dict)
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)

    def opset(self, domain: str = "") -> int | None:
        return self.opsets.get("" if domain == "ai.onnx" else domain)

    def constant(self, name: str) -> np.ndarray | None:
        return self.constants.get(name)


def onnx_and_handlers(model: onnx.ModelProto, *, data_prop: bool = True) -> onnx.ModelProto:
    """ONNX inference, then the shape handlers for custom-domain outputs, a few rounds (the symbolic walk's
    fallback; everyone else calls :func:`gsrewrite.shapes.inference.infer_shapes`)."""
    inferred = _copy_if_same(model, onnx_infer_shapes(model, data_prop=data_prop))
    for _ in range(MAX_ROUNDS):
        if not _ask_handlers(inferred):
            break
        inferred = _copy_if_same(inferred, onnx_infer_shapes(inferred, data_prop=data_prop))
    return inferred


def annotate_node(node: gs.Node, context: ShapeContext | None = None) -> int:
    """Fill in the dtype and shape of ``node``'s untyped outputs where a handler knows them; the count filled."""
    if not any(isinstance(t, gs.Variable) and t.dtype is None and t.shape is None for t in node.outputs):
        return 0
    answer = plugin_hooks.infer_shape(node, context or ShapeContext())
    filled = 0
    for tensor, known in zip(node.outputs, answer or (), strict=False):
        if known is None or not isinstance(tensor, gs.Variable) or not tensor.name:
            continue
        dtype, shape = known
        if tensor.dtype is None and dtype is not None:
            tensor.dtype, filled = dtype, filled + 1
        if tensor.shape is None and shape is not None:
            tensor.shape = list(shape)
    return filled


def _copy_if_same(original: onnx.ModelProto, result: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX inference gives the same object back when it fails: never edit the caller's model."""
    if result is not original:
        return result
    copy = onnx.ModelProto()
    copy.CopyFrom(original)
    return copy


def _ask_handlers(model: onnx.ModelProto) -> int:
    """Ask the handlers about the main graph's untyped custom-domain outputs; add what they answer as
    ``value_info``. Returns the number of tensors typed."""
    graph = model.graph
    custom = [n for n in graph.node if n.domain not in STANDARD_DOMAINS]
    if not custom:
        return 0
    types = {vi.name: vi.type for vi in (*graph.input, *graph.value_info, *graph.output)
             if vi.type.tensor_type.elem_type}
    small = {t.name: t for t in graph.initializer if int(np.prod(t.dims)) <= SMALL_CONSTANT}
    context = ShapeContext({o.domain: o.version for o in model.opset_import},
                           {name: numpy_helper.to_array(t) for name, t in small.items()})
    outputs = {o.name for o in graph.output}
    added = 0
    for node in custom:
        untyped = [o for o in node.output if o and o not in types]
        if not untyped:
            continue
        answer = plugin_hooks.infer_shape(_as_gs_node(node, types, small), context) or ()
        for name, known in zip(node.output, answer, strict=False):
            if known is None or name not in untyped or known[0] is None:
                continue
            info = onnx.helper.make_tensor_value_info(name, _elem_type(known[0]), _dims(known[1]))
            if name not in outputs:
                graph.value_info.append(info)
            types[name] = info.type
            added += 1
    return added


def _as_gs_node(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto],
                small: Mapping[str, onnx.TensorProto]) -> gs.Node:
    """The node as a handler sees it: typed input variables (small initializers as constants)."""
    inputs: list[gs.Tensor] = []
    for name in node.input:
        if name in small:
            inputs.append(gs.Constant(name, numpy_helper.to_array(small[name])))
        elif name in types:
            tensor_type = types[name].tensor_type
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in tensor_type.shape.dim] if tensor_type.HasField("shape") else None
            inputs.append(gs.Variable(name, dtype=dtype, shape=shape))
        else:
            inputs.append(gs.Variable(name) if name else gs.Variable.empty())
    attrs = {a.name: _attr_value(a) for a in node.attribute}
    return gs.Node(node.op_type, node.name, attrs=attrs, inputs=inputs,
                   outputs=[gs.Variable(o) for o in node.output], domain=node.domain)


def _attr_value(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


def _elem_type(dtype: Any) -> int:
    if isinstance(dtype, int):
        return dtype
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _dims(shape: Sequence[Any] | None) -> list[int | str | None] | None:
    if shape is None:
        return None
    return [d if isinstance(d, (int, str)) else None for d in shape]
