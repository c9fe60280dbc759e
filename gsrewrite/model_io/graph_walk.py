"""Walking an ONNX model: its graphs (with If/Loop/Scan subgraphs), nodes and tensors.

Every check in :mod:`gsrewrite.model_io` and the summary in :mod:`gsrewrite.info` need to visit the same
places: the main graph, every subgraph nested in node attributes, and the bodies of model-local functions.
The walkers here yield each item together with a short human-readable description of where it lives, so
error messages can name it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto


def node_label(node: NodeProto, index: int) -> str:
    """``'name' (OpType)`` for a named node, ``#index (OpType)`` for an anonymous one."""
    name = f"'{node.name}'" if node.name else f"#{index}"
    return f"{name} ({node.op_type})"


#: The standard ops whose attributes hold graphs; nodes of other domains may hold them too.
CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def may_hold_graphs(node: NodeProto) -> bool:
    """False for a standard op other than control flow: the ONNX standard gives no other op a graph attribute
    (a model that does anyway is rejected by onnxruntime; its walks here do not look inside)."""
    return node.op_type in CONTROL_FLOW or node.domain not in ("", "ai.onnx")


def node_subgraphs(node: NodeProto) -> Iterator[tuple[str, GraphProto]]:
    """The subgraphs held in the node's attributes (If branches, Loop/Scan bodies), with attribute names."""
    if not may_hold_graphs(node):
        return
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == AttributeProto.GRAPHS:
            for i, graph in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", graph


def iter_graphs(model: ModelProto) -> Iterator[tuple[GraphProto, str]]:
    """The main graph and every subgraph, depth first, each with a description of where it sits."""
    yield from _graphs_in(model.graph, "the main graph")
    for function in model.functions:
        for i, node in enumerate(function.node):
            for attr_name, sub in node_subgraphs(node):
                yield from _graphs_in(sub, _sub_where(attr_name, node, i, f"function '{function.name}'"))


def _graphs_in(graph: GraphProto, where: str) -> Iterator[tuple[GraphProto, str]]:
    yield graph, where
    for i, node in enumerate(graph.node):
        if may_hold_graphs(node):  # (most nodes: no generator made to find no subgraph)
            for attr_name, sub in node_subgraphs(node):
                yield from _graphs_in(sub, _sub_where(attr_name, node, i, where))


def _sub_where(attr_name: str, node: NodeProto, index: int, parent: str) -> str:
    return f"subgraph '{attr_name}' of node {node_label(node, index)} in {parent}"


def iter_nodes(model: ModelProto) -> Iterator[NodeProto]:
    """Every node of every graph and subgraph (function bodies excluded)."""
    for graph, _ in _graphs_in(model.graph, "the main graph"):
        yield from graph.node


def walk_nodes(nodes: Iterable[NodeProto]) -> Iterator[NodeProto]:
    """``nodes`` (a graph's or a function body's), each followed by the nodes of its subgraphs, recursively."""
    for node in nodes:
        yield node
        for _, graph in node_subgraphs(node):
            yield from walk_nodes(graph.node)


def iter_tensors(model: ModelProto) -> Iterator[tuple[TensorProto, str]]:
    """Every tensor stored in the model, with a description naming it.

    Covers initializers and sparse initializers of all graphs, and tensor-valued attributes (``Constant``
    values, ``ConstantOfShape`` values, ...) of nodes in all graphs and in function bodies.
    """
    for graph, where in iter_graphs(model):
        for tensor in graph.initializer:
            yield tensor, f"initializer '{tensor.name}'"
        for sparse in graph.sparse_initializer:
            yield from _sparse_parts(sparse, f"sparse initializer '{sparse.values.name}'")
        yield from _attribute_tensors(graph.node, where)
    for function in model.functions:
        yield from _attribute_tensors(function.node, f"function '{function.name}'")


_TENSOR_ATTRIBUTES = frozenset({AttributeProto.TENSOR, AttributeProto.TENSORS, AttributeProto.SPARSE_TENSOR,
                                AttributeProto.SPARSE_TENSORS})


def _attribute_tensors(nodes: Iterable[NodeProto], where: str) -> Iterator[tuple[TensorProto, str]]:
    for i, node in enumerate(nodes):
        for attr in node.attribute:
            if attr.type not in _TENSOR_ATTRIBUTES:  # most attributes: no label to build
                continue
            label = f"attribute '{attr.name}' of node {node_label(node, i)} in {where}"
            if attr.type == AttributeProto.TENSOR:
                yield attr.t, label
            elif attr.type == AttributeProto.TENSORS:
                for k, tensor in enumerate(attr.tensors):
                    yield tensor, f"{label} [{k}]"
            elif attr.type == AttributeProto.SPARSE_TENSOR:
                yield from _sparse_parts(attr.sparse_tensor, label)
            elif attr.type == AttributeProto.SPARSE_TENSORS:
                for k, sparse in enumerate(attr.sparse_tensors):
                    yield from _sparse_parts(sparse, f"{label} [{k}]")


def tensor_protos(model: ModelProto) -> Iterator[TensorProto]:
    """The tensors of :func:`iter_tensors` without their descriptions: one pass over the nodes, nothing formatted
    (for sums and scans; a check that fails looks the description up with :func:`iter_tensors`)."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        yield from _node_tensors(function.node)


def _graph_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    yield from _node_tensors(graph.node)


def _node_tensors(nodes: Iterable[NodeProto]) -> Iterator[TensorProto]:
    for node in nodes:
        attributes = node.attribute
        if not attributes:  # (half the cost of iterating an empty list of them: most nodes have none)
            continue
        for attr in attributes:
            kind = attr.type
            if kind == AttributeProto.TENSOR:
                yield attr.t
            elif kind == AttributeProto.TENSORS:
                yield from attr.tensors
            elif kind == AttributeProto.SPARSE_TENSOR:
                yield attr.sparse_tensor.values
                yield attr.sparse_tensor.indices
            elif kind == AttributeProto.SPARSE_TENSORS:
                for sparse in attr.sparse_tensors:
                    yield sparse.values
                    yield sparse.indices
            elif kind == AttributeProto.GRAPH:
                yield from _graph_tensors(attr.g)
            elif kind == AttributeProto.GRAPHS:
                for graph in attr.graphs:
                    yield from _graph_tensors(graph)


def _sparse_parts(sparse: onnx.SparseTensorProto, label: str) -> Iterator[tuple[TensorProto, str]]:
    yield sparse.values, f"values of {label}"
    yield sparse.indices, f"indices of {label}"
