"""The bridge between ONNX models and onnx-graphsurgeon graphs, and small graph queries.

``to_graph`` (in :mod:`gsrewrite.graph.conversion`) runs ONNX shape inference first (so tensors carry dtypes
and shapes the passes rely on), and ``to_model`` puts the rewritten graph back into a copy of the original model
so that everything the graph does not hold (metadata, IR version, producer, doc strings, functions, extra opset
imports) survives.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter, update_import_domains
from onnx_graphsurgeon.ir.tensor import LazyValues, SparseValues

from gsrewrite.model_io.graph_walk import CONTROL_FLOW
from gsrewrite.model_io.scratch import spill
from gsrewrite.model_io.weights import is_reference, tensor_values, weights_dir

log = logging.getLogger(__name__)


def default_opset(model: onnx.ModelProto) -> int:
    """The model's version of the default ONNX domain (1 when it imports none)."""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def import_onnx(model: onnx.ModelProto) -> gs.Graph:
    """``gs.import_onnx(model)``, except that a string attribute that is not UTF-8 (an EPContext engine cache)
    stays bytes and exports unchanged: onnx-graphsurgeon decodes every string attribute of the main graph."""
    binary = [(index, attr, attr.s) for index, node in enumerate(model.graph.node) for attr in node.attribute
              if attr.type == onnx.AttributeProto.STRING and not _is_utf8(attr.s)]
    for _, attr, _ in binary:
        attr.s = b""  # restored below: the caller's model is left as it was
    try:
        graph = gs.import_onnx(model)
    finally:
        for _, attr, value in binary:
            attr.s = value
    for index, attr, value in binary:
        graph.nodes[index].attrs[attr.name] = value
    folder = weights_dir()
    if folder is not None:
        for sub in (graph, *graph.subgraphs(recursive=True)):
            for tensor in sub.tensors().values():
                if isinstance(tensor, gs.Constant) and type(tensor._values) is LazyValues \
                        and is_reference(tensor._values.tensor):
                    tensor._values = FileValues(tensor._values.tensor, folder)
                    # exported as its reference while untouched; once a pass replaces the values by an array,
                    # inline (onnx-graphsurgeon would otherwise mark the new payload external)
                    tensor.data_location = None
    return graph


class FileValues(LazyValues):
    """The lazy values of a constant whose payload stays in a file (a model loaded weightless, or its external
    data): read from ``folder`` (bound by :func:`gsrewrite.model_io.weights.weights_from` when the graph was
    imported) on demand; exported as the reference it is."""

    def __init__(self, tensor: onnx.TensorProto, folder: str) -> None:
        super().__init__(tensor)
        self.folder = folder

    def load(self) -> np.ndarray:
        return tensor_values(self.tensor, self.folder)


def made_values(name: str, array: np.ndarray) -> np.ndarray | FileValues:
    """The values of a constant a pass or a fusion makes: a large array goes to the request's scratch file at once
    (:mod:`gsrewrite.model_io.scratch`) and is read back from there when used, so what a rewrite makes does not
    pile up in memory while it runs; without a scratch file bound (a model read whole), the array itself."""
    spilled = spill(name, array)
    return FileValues(spilled, weights_dir() or "") if spilled is not None else array


def lazy_values(tensor: onnx.TensorProto) -> LazyValues:
    """Lazy values of ``tensor``: read from its file when it is a reference (and a model folder is bound)."""
    folder = weights_dir()
    if folder is not None and is_reference(tensor):
        return FileValues(tensor, folder)
    return LazyValues(tensor)


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def to_model(graph: gs.Graph, original: onnx.ModelProto, value_info: Collection[str] | None = None) -> onnx.ModelProto:
    """Export ``graph`` into a copy of ``original``: same metadata, IR version, producer and functions; the
    default-domain opset is the graph's, other domains the graph uses are added. The one exporter.

    With ``value_info``, only those intermediate tensors get a ``value_info`` entry (graph inputs and
    outputs always keep their types); ``graph`` is not usable afterwards: the other tensors lose their types.
    """
    if value_info is not None:
        _forget_types(graph, set(value_info))
    model = onnx.ModelProto()
    copy_fields(model, original, skip=("graph",))
    write_graph(graph, model.graph)
    model.graph.name = original.graph.name
    if original.graph.doc_string:  # proto2: assigning "" would add an empty field
        model.graph.doc_string = original.graph.doc_string
    _merge_opsets(model, update_import_domains(graph))
    return model


def _forget_types(graph: gs.Graph, keep: set[str]) -> None:
    graphs = [graph, *nested_graphs(graph)]
    interface = {id(t) for g in graphs for t in (*g.inputs, *g.outputs)}
    for g in graphs:
        for node in g.nodes:
            for tensor in node.outputs:
                if id(tensor) not in interface and tensor.name not in keep:
                    tensor.dtype, tensor.shape = None, None


def write_graph(graph: gs.Graph, target: onnx.GraphProto) -> None:
    """onnx-graphsurgeon's ``export_graph``, written straight into ``target`` (the weights are copied once; a constant
    that held an array reads it from ``target`` afterwards)."""
    target.node.extend(OnnxExporter.export_node(n) for n in graph.nodes)
    target.input.extend(OnnxExporter.export_value_info_proto(t, False) for t in graph.inputs)
    target.output.extend(OnnxExporter.export_value_info_proto(t, False) for t in graph.outputs)
    tensors = graph.tensors()
    for tensor in tensors.values():
        if isinstance(tensor, gs.Constant) and isinstance(tensor._values, SparseValues):
            target.sparse_initializer.append(OnnxExporter.export_sparse_tensor_proto(tensor))
        elif isinstance(tensor, gs.Constant):
            made = tensor._values if isinstance(tensor._values, np.ndarray) else None
            spilled = spill(tensor.name, made) if made is not None else None
            if spilled is not None:  # a large array a pass made: to the request's scratch file, not the proto
                target.initializer.append(spilled)
                tensor._values = FileValues(target.initializer[-1], weights_dir() or "")
                continue
            target.initializer.append(OnnxExporter.export_tensor_proto(tensor))
            if made is not None:
                # the array now lives in the proto: the graph reads it from there if it is used again, so what a
                # rewrite made is not held twice while the rest is exported
                tensor._values = LazyValues(target.initializer[-1])
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


def topological_order(nodes: list[gs.Node]) -> list[gs.Node] | None:
    """``nodes`` ordered so that every node follows the producers of its inputs, keeping the given order wherever
    it already is one (a node's producers that come later are pulled in just ahead of it): an iterative
    depth-first walk, producers first. ``None`` when the nodes make a cycle. Nodes holding subgraphs read outer
    tensors no input shows: callers check :func:`may_hold_subgraphs` first."""
    index = {id(node): i for i, node in enumerate(nodes)}
    state = [0] * len(nodes)  # 0 new, 1 on the DFS stack, 2 placed
    order: list[gs.Node] = []
    for start in range(len(nodes)):
        if state[start]:
            continue
        state[start] = 1
        stack = [(start, 0)]  # (node index, next input to look at)
        while stack:
            i, k = stack.pop()
            inputs = nodes[i].inputs
            while k < len(inputs):
                producer = inputs[k].inputs[0] if inputs[k].inputs else None
                k += 1
                j = index.get(id(producer)) if producer is not None else None
                if j is None or state[j] == 2:
                    continue
                if state[j] == 1:
                    return None
                state[j] = 1
                stack.append((i, k))
                stack.append((j, 0))
                break
            else:
                state[i] = 2
                order.append(nodes[i])
    return order


def toposort(graph: gs.Graph) -> gs.Graph:
    """Sort ``graph``'s nodes so that every node follows the producers of its inputs, keeping the current order
    wherever it already is one (:func:`topological_order`). Graphs whose nodes may hold subgraphs (their
    outer-scope reads are dependencies too), and cyclic ones, go to onnx-graphsurgeon's toposort (which reports
    the cycle)."""
    nodes = graph.nodes
    order = None if any(may_hold_subgraphs(node) for node in nodes) else topological_order(nodes)
    if order is None:
        return graph.toposort()
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
#: Largest weight kept in memory once read from its file (a larger one is read again on each use, usually from the
#: page cache): shape arithmetic and checks keep their small constants, while the weights a fusion reads to pack
#: (Q, K, V) are not resident beside what it makes of them (BERT-base: 42 MB less at the candidate's validation).
MAX_KEPT_FILE_BYTES = 1 << 20
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
    if isinstance(stored, FileValues) and stored.nbytes > MAX_KEPT_FILE_BYTES:
        return np.asarray(stored.load())  # read again when needed: never a second copy of the large weights
    if isinstance(stored, LazyValues):
        value = _LOADED.get(stored)
        if value is None:
            value = _LOADED[stored] = np.asarray(stored.load())
        return value
    return np.asarray(tensor.values)
