"""The bridge between ONNX models and onnx-graphsurgeon graphs, and small graph queries.

``to_graph`` runs ONNX shape inference first (so tensors carry dtypes and shapes the passes rely on), and
``to_model`` puts the rewritten graph back into a copy of the original model so that everything the graph
does not hold (metadata, IR version, producer, doc strings, functions, extra opset imports) survives.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter, update_import_domains
from onnx_graphsurgeon.ir.tensor import LazyValues, SparseValues

from gsrewrite.model_io.graph_walk import CONTROL_FLOW, iter_graphs
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


def default_opset(model: onnx.ModelProto) -> int:
    """The model's version of the default ONNX domain (1 when it imports none)."""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference with data propagation; on any failure the model is returned unchanged.

    Data propagation is used only when it is safe (:func:`data_propagation_is_safe`), both for the model and
    for what plain inference finds (a chain of Concats doubling a constant to 2**32 elements is only seen
    there); plain inference costs about a millisecond on a transformer export.
    """
    if over_protobuf_limit(model, _INFERENCE_LIMIT - 1):
        log.info("model is over 2 GB: skipping in-memory shape inference")
        return model
    model = _negative_dims_cleared(model)
    try:
        plain = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=False)
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


def to_graph(model: onnx.ModelProto, *, shapes: bool = True) -> gs.Graph:
    """Import a model into onnx-graphsurgeon (after shape inference when ``shapes``).

    With ``shapes``, inference runs on a copy without the large weights (they only need their type and
    shape) and the graph's constants read the original tensors lazily (see
    :func:`gsrewrite.simplifier.conversion.import_graph`): ONNX inference would otherwise serialize and parse
    the whole model twice. ``Constant`` nodes become graph constants on the way, as canonicalization does.
    """
    if not shapes:
        from gsrewrite.engine.fast_import import import_onnx

        return import_onnx(model)
    from gsrewrite.simplifier.conversion import import_graph

    return import_graph(model)[0]


def to_model(graph: gs.Graph, original: onnx.ModelProto) -> onnx.ModelProto:
    """Export ``graph`` into a copy of ``original``: same metadata, IR version, producer and functions."""
    model = onnx.ModelProto()
    copy_fields(model, original, skip=("graph",))
    write_graph(graph, model.graph)
    model.graph.name = original.graph.name
    model.graph.doc_string = original.graph.doc_string
    _merge_opsets(model, update_import_domains(graph))
    return model


def write_graph(graph: gs.Graph, target: onnx.GraphProto) -> None:
    """onnx-graphsurgeon's ``export_graph``, written straight into ``target`` (the weights are copied once)."""
    target.node.extend(OnnxExporter.export_node(n) for n in graph.nodes)
    target.input.extend(OnnxExporter.export_value_info_proto(t, False) for t in graph.inputs)
    target.output.extend(OnnxExporter.export_value_info_proto(t, False) for t in graph.outputs)
    tensors = graph.tensors()
    for tensor in tensors.values():
        if isinstance(tensor, gs.Constant) and isinstance(tensor._values, SparseValues):
            target.sparse_initializer.append(OnnxExporter.export_sparse_tensor_proto(tensor))
        elif isinstance(tensor, gs.Constant):
            target.initializer.append(OnnxExporter.export_tensor_proto(tensor))
    interface = {t.name for t in (*graph.inputs, *graph.outputs)}
    target.value_info.extend(OnnxExporter.export_value_info_proto(t, False) for name, t in tensors.items()
                             if isinstance(t, gs.Variable) and name not in interface
                             and (t.dtype is not None or t.shape is not None))


def copy_fields(target: Any, source: Any, skip: Iterable[str] = ()) -> None:
    """Copy every set field of protobuf message ``source`` into ``target`` (of the same type), but ``skip``."""
    skipped = set(skip)
    for field, value in source.ListFields():
        if field.name in skipped:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _merge_opsets(model: onnx.ModelProto, exported: Iterable[onnx.OperatorSetIdProto]) -> None:
    versions = {imp.domain: imp.version for imp in model.opset_import}
    for imp in exported:
        domain = "" if imp.domain == "ai.onnx" else imp.domain
        if domain not in versions and not (domain == "" and "ai.onnx" in versions):
            model.opset_import.append(onnx.helper.make_opsetid(domain, imp.version))
            versions[domain] = imp.version
        elif domain == "" and versions.get("", imp.version) != imp.version:
            for entry in model.opset_import:
                if entry.domain == "":
                    entry.version = imp.version


def producer(tensor: gs.Tensor) -> gs.Node | None:
    """The node that produces ``tensor`` (None for graph inputs and constants)."""
    return tensor.inputs[0] if tensor.inputs else None


def consumers(tensor: gs.Tensor) -> list[gs.Node]:
    """The distinct nodes that read ``tensor``."""
    seen: dict[int, gs.Node] = {}
    for node in tensor.outputs:
        seen.setdefault(id(node), node)
    return list(seen.values())


def is_empty(tensor: gs.Tensor | None) -> bool:
    """True for an omitted optional input."""
    return tensor is None or (isinstance(tensor, gs.Variable) and not tensor.name)


def may_hold_subgraphs(node: gs.Node) -> bool:
    """False for a node that certainly holds no subgraph (a standard op other than control flow)."""
    return node.op in CONTROL_FLOW or node.domain not in (None, "", "ai.onnx")


def nested_graphs(graph: gs.Graph, recursive: bool = True) -> Iterator[gs.Graph]:
    """``graph.subgraphs(recursive)``, without visiting the attributes of nodes that cannot hold a subgraph."""
    for node in graph.nodes:
        if may_hold_subgraphs(node):
            yield from node.subgraphs(recursive=recursive)


def subgraph_outer_names(graph: gs.Graph) -> set[str]:
    """Names of tensors of ``graph`` that nodes inside its subgraphs (If/Loop/Scan bodies) read."""
    names: set[str] = set()
    for sub in nested_graphs(graph):
        local = {t.name for n in sub.nodes for t in n.outputs} | {t.name for t in sub.inputs}
        for node in sub.nodes:
            names.update(t.name for t in node.inputs if t.name and t.name not in local)
    return names


def replace_uses(old: gs.Tensor, new: gs.Tensor) -> None:
    """Make every consumer of ``old`` read ``new`` instead."""
    for node in list(old.outputs):
        swap(node.inputs, old, new)


def swap(tensors: list[gs.Tensor], old: gs.Tensor, new: gs.Tensor) -> None:
    """Replace ``old`` by ``new`` in a node's input or output list (index by index: gs keeps both ends in sync)."""
    for i, tensor in enumerate(tensors):
        if tensor is old:
            tensors[i] = new


def walk_nodes(graph: gs.Graph) -> Iterator[gs.Node]:
    """Every node of the graph and of its subgraphs."""
    yield from graph.nodes
    for sub in nested_graphs(graph):
        yield from sub.nodes


class NameSource:
    """Unique names for new tensors and nodes; the names in use (subgraphs included) are collected on first use."""

    def __init__(self, graph: gs.Graph) -> None:
        self._graph = graph
        self._taken: set[str] | None = None
        self._counts: dict[str, int] = {}

    def __call__(self, base: str) -> str:
        if self._taken is None:
            self._taken = _names_in_use(self._graph)
        name = base
        while name in self._taken:
            self._counts[base] = self._counts.get(base, 0) + 1
            name = f"{base}_{self._counts[base]}"
        self._taken.add(name)
        return name


def _names_in_use(graph: gs.Graph) -> set[str]:
    taken = {t.name for t in (*graph.inputs, *graph.outputs)}
    for node in graph.nodes:
        taken.add(node.name)
        taken.update(t.name for t in node.inputs)
        taken.update(t.name for t in node.outputs)
        if may_hold_subgraphs(node):
            for sub in node.subgraphs():
                taken |= _names_in_use(sub)
    return taken


def is_sorted(graph: gs.Graph) -> bool:
    """True when every node comes after the producers of its inputs (subgraphs included)."""
    local = {id(t) for n in graph.nodes for t in n.outputs}
    produced: set[int] = set()
    for node in graph.nodes:
        if any(id(t) in local and id(t) not in produced for t in node.inputs):
            return False
        if may_hold_subgraphs(node) and any(not is_sorted(sub) for sub in node.subgraphs()):
            return False
        produced.update(id(t) for t in node.outputs)
    return True


def toposort(graph: gs.Graph) -> gs.Graph:
    """Sort ``graph``'s nodes so that every node follows the producers of its inputs, keeping the current order
    wherever it already is one (a node's producers that come later are pulled in just ahead of it). Graphs whose
    nodes may
    hold subgraphs (their outer-scope reads are dependencies too), and cyclic ones, go to onnx-graphsurgeon's
    toposort."""
    nodes = graph.nodes
    if any(may_hold_subgraphs(node) for node in nodes):
        return graph.toposort()
    index = {id(node): i for i, node in enumerate(nodes)}
    state = [0] * len(nodes)  # 0 new, 1 on the DFS stack, 2 placed
    order: list[gs.Node] = []
    for start in range(len(nodes)):
        if state[start]:
            continue
        state[start] = 1
        stack = [(start, 0)]  # (node index, next input to look at): iterative DFS, producers first
        while stack:
            i, k = stack.pop()
            inputs = nodes[i].inputs
            while k < len(inputs):
                producer = inputs[k].inputs[0] if inputs[k].inputs else None
                k += 1
                j = index.get(id(producer)) if producer is not None else None
                if j is None or state[j] == 2:
                    continue
                if state[j] == 1:  # a cycle: let onnx-graphsurgeon report it
                    return graph.toposort()
                state[j] = 1
                stack.append((i, k))
                stack.append((j, 0))
                break
            else:
                state[i] = 2
                order.append(nodes[i])
    if any(a is not b for a, b in zip(order, nodes, strict=True)):
        graph.nodes = order
    return graph


def cleanup(graph: gs.Graph) -> gs.Graph:
    """``graph.cleanup(remove_unused_graph_inputs=False)``: drop (and disconnect) the nodes no graph output
    depends on. Done here for graphs without subgraphs or local functions (several times faster); others go to
    onnx-graphsurgeon."""
    nodes = graph.nodes
    if graph.functions or any(may_hold_subgraphs(node) for node in nodes):
        return graph.cleanup(remove_unused_graph_inputs=False)
    for tensor in graph.inputs:
        tensor.inputs.clear()  # a graph input has no producer (as onnx-graphsurgeon's cleanup makes sure)
    used: set[int] = set()
    pending = [tensor for tensor in graph.outputs]
    while pending:
        tensor = pending.pop()
        for producer in tensor.inputs:
            if id(producer) not in used:
                used.add(id(producer))
                pending.extend(producer.inputs)
    if len(used) == len(nodes):
        return graph
    kept = []
    for node in nodes:
        if id(node) in used:
            kept.append(node)
        else:
            node.inputs.clear()
            node.outputs.clear()
    graph.nodes = kept
    return graph


#: Largest dense array constant_values makes of a sparse constant (onnx-graphsurgeon densifies to float64).
MAX_DENSE_BYTES = 1 << 30
#: Arrays of file-backed constants read through constant_values (they live as long as the graph's constants).
_LOADED: weakref.WeakKeyDictionary[LazyValues, np.ndarray] = weakref.WeakKeyDictionary()


def constant_values(tensor: gs.Constant) -> np.ndarray:
    """``tensor.values``, without replacing a file-backed constant's lazy storage by the array.

    onnx-graphsurgeon's ``values`` keeps the loaded array in place of the TensorProto, so exporting the constant
    converts the array back (three copies of the data); read through here, an untouched weight is exported as its
    original TensorProto. The array is loaded once per constant and must not be modified. A sparse constant
    whose dense form would exceed :data:`MAX_DENSE_BYTES` raises ModelTooLargeError instead.
    """
    stored = tensor._values
    if isinstance(stored, SparseValues) and math.prod(stored.shape) * 8 > MAX_DENSE_BYTES:
        from gsrewrite.errors import ModelTooLargeError

        raise ModelTooLargeError(f"sparse constant '{tensor.name}' of shape {list(stored.shape)} would take "
                                 f"{math.prod(stored.shape) * 8:,} bytes once made dense")
    if isinstance(stored, LazyValues):
        value = _LOADED.get(stored)
        if value is None:
            value = _LOADED[stored] = np.asarray(stored.load())
        return value
    return np.asarray(tensor.values)
