"""Model <-> graph for simplify: shape inference on a weightless copy, export without extra copies.

``onnx.shape_inference`` serializes the whole model and parses the result back; for a model of a few
megabytes that costs more than all the passes. Large initializers carry nothing inference needs besides
their type and shape, so :func:`import_graph` hides them (as graph inputs of the same type) from a copy,
infers that, imports it, and turns those inputs into constants backed by the original tensors (read lazily,
never copied). Small
initializers (shape vectors, axes, scalars) stay: data propagation reads their values.

Export is :func:`gsrewrite.graph.core.to_model`, the one exporter (the weights are copied once).
"""

from __future__ import annotations

import logging
import math

import onnx
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import copy_fields, import_onnx, lazy_values
from gsrewrite.shapes.inference import infer_shapes

log = logging.getLogger(__name__)

#: Initializers larger than this (bytes of data) are hidden from shape inference.
HIDDEN_FROM_INFERENCE = 1024


def import_graph(model: onnx.ModelProto) -> tuple[gs.Graph, int]:
    """``model``'s graph in onnx-graphsurgeon, with the dtypes and shapes ONNX shape inference finds, and the
    number of top-level ``Constant`` nodes that were turned into initializers on the way (cheaper here than
    as graphsurgeon nodes)."""
    initializers, nodes = _constants_as_initializers(model.graph)
    converted = len(model.graph.node) - len(nodes)
    big = {t.name: t for t in initializers if _data_bytes(t) > HIDDEN_FROM_INFERENCE}
    light = _light_copy(model, nodes, [t for t in initializers if t.name not in big], big)
    graph = import_onnx(infer_shapes(light))
    if big:
        hidden = [t for t in graph.inputs if t.name in big and isinstance(t, gs.Variable)]
        for tensor in hidden:
            tensor.to_constant(lazy_values(big[tensor.name]))
        hidden_ids = {id(t) for t in hidden}
        graph.inputs = [t for t in graph.inputs if id(t) not in hidden_ids]
    return graph, converted


def _constants_as_initializers(graph: onnx.GraphProto) -> tuple[list[onnx.TensorProto], list[onnx.NodeProto]]:
    """The graph's initializers plus one per ``Constant`` node (except graph outputs), and the other nodes."""
    outputs = {o.name for o in graph.output}
    initializers, nodes = list(graph.initializer), []
    for node in graph.node:
        tensor = None
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1 \
                and node.output[0] not in outputs:
            tensor = _constant_tensor(node)
        if tensor is None:
            nodes.append(node)
        else:
            initializers.append(tensor)
    return initializers, nodes


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    if len(node.attribute) != 1 or node.attribute[0].ref_attr_name:
        return None
    attr, name = node.attribute[0], node.output[0]
    if attr.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
        tensor.name = name
        return tensor
    kinds = {"value_float": (onnx.TensorProto.FLOAT, False), "value_floats": (onnx.TensorProto.FLOAT, True),
             "value_int": (onnx.TensorProto.INT64, False), "value_ints": (onnx.TensorProto.INT64, True)}
    if attr.name not in kinds:
        return None  # strings and sparse values: left to the graph-level conversion
    data_type, is_list = kinds[attr.name]
    values = list(onnx.helper.get_attribute_value(attr)) if is_list else [onnx.helper.get_attribute_value(attr)]
    return onnx.helper.make_tensor(name, data_type, [len(values)] if is_list else [], values)


def _light_copy(model: onnx.ModelProto, nodes: list[onnx.NodeProto], small: list[onnx.TensorProto],
                big: dict[str, onnx.TensorProto]) -> onnx.ModelProto:
    """A copy of ``model`` with ``nodes`` and ``small`` initializers; ``big`` ones become typed graph inputs."""
    light = onnx.ModelProto()
    copy_fields(light, model, skip=("graph",))
    copy_fields(light.graph, model.graph, skip=("initializer", "input", "node"))
    light.graph.node.extend(_bare(n) for n in nodes)
    light.graph.initializer.extend(small)
    light.graph.input.extend(vi for vi in model.graph.input if vi.name not in big)
    light.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in big.values())
    return light


def _bare(node: onnx.NodeProto) -> onnx.NodeProto:
    """The node without its doc string and metadata (debug information inference and graphsurgeon ignore)."""
    if not node.metadata_props and not node.doc_string:
        return node
    bare = onnx.NodeProto(input=node.input, output=node.output, op_type=node.op_type, attribute=node.attribute)
    for name in ("name", "domain", "overload"):  # set only when present: an empty domain must stay unset
        if node.HasField(name):
            setattr(bare, name, getattr(node, name))
    return bare


def _data_bytes(tensor: onnx.TensorProto) -> int:
    """The size of the ``raw_data`` payload, from the declaration when it can be (reading ``raw_data`` copies
    it: benchmarks/results/code_figures.md; loading checked that payloads match their declarations)."""
    if not tensor.HasField("raw_data"):
        return 0
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return len(tensor.raw_data)
    return math.prod(tensor.dims) * itemsize if itemsize and min(tensor.dims, default=0) >= 0 \
        else len(tensor.raw_data)


def to_graph(model: onnx.ModelProto, *, shapes: bool = True) -> gs.Graph:
    """Import a model into onnx-graphsurgeon (after shape inference when ``shapes``).

    With ``shapes``, inference runs on a copy without the large weights (they only need their type and
    shape) and the graph's constants read the original tensors lazily (see
    :func:`import_graph`): ONNX inference would otherwise serialize and parse
    the whole model twice. ``Constant`` nodes become graph constants on the way, as canonicalization does.
    """
    if not shapes:
        return import_onnx(model)
    return import_graph(model)[0]
