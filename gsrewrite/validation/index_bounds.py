"""How large an integer input may be: the rows of the embedding tables it indexes.

An integer graph input that reaches the ``indices`` of a ``Gather`` — directly or through ops that keep its
values (Cast, Reshape, Unsqueeze, ...) — must stay below the size of the gathered table on the gather axis,
or onnxruntime refuses to run. The table's size is known when it is an initializer or a Constant (possibly
behind a Cast or DequantizeLinear, as with fp16 or quantized embeddings).
"""

from __future__ import annotations

from collections import defaultdict, deque

import onnx

#: Ops whose first output holds the values of their first input (only shape or dtype change).
VALUE_PRESERVING = frozenset(
    {"Cast", "CastLike", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand", "Transpose"}
)
#: Ops through which a constant table keeps its shape (followed backwards from a Gather's data).
_SHAPE_PRESERVING = frozenset({"Cast", "CastLike", "Identity", "DequantizeLinear"})


def gather_index_bounds(graph: onnx.GraphProto, names: list[str]) -> dict[str, int]:
    """For each of ``names`` that indexes a constant table: the (smallest) table size on the gather axis."""
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in graph.node:
        for index, name in enumerate(node.input):
            consumers[name].append((node, index))
    tables = _TableShapes(graph)
    bounds = {}
    for name in names:
        rows = _rows_reached(name, consumers, tables)
        if rows:
            bounds[name] = min(rows)
    return bounds


def _rows_reached(
    start: str, consumers: dict[str, list[tuple[onnx.NodeProto, int]]], tables: _TableShapes
) -> list[int]:
    rows: list[int] = []
    seen = {start}
    queue = deque([start])
    while queue:
        for node, index in consumers.get(queue.popleft(), ()):
            if node.op_type == "Gather" and index == 1 and node.domain in ("", "ai.onnx"):
                size = tables.gather_size(node)
                if size:
                    rows.append(size)
            elif _passes_values(node, index) and node.output[0] not in seen:
                seen.add(node.output[0])
                queue.append(node.output[0])
    return rows


def _passes_values(node: onnx.NodeProto, index: int) -> bool:
    return node.op_type in VALUE_PRESERVING and index == 0 and len(node.output) > 0


class _TableShapes:
    """Shapes of the constant tensors of a graph (initializers, Constant nodes), looked up by name."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self._shapes = {t.name: list(t.dims) for t in graph.initializer}
        self._producers = {}
        for node in graph.node:
            for output in node.output:
                self._producers[output] = node
            if node.op_type == "Constant" and node.output:
                shape = _constant_shape(node)
                if shape is not None:
                    self._shapes[node.output[0]] = shape

    def gather_size(self, gather: onnx.NodeProto) -> int | None:
        """The size of the Gather's data on its axis, when the data is a (cast) constant."""
        shape = self._shape_of(gather.input[0])
        if not shape:
            return None
        axis = next((a.i for a in gather.attribute if a.name == "axis"), 0)
        if not -len(shape) <= axis < len(shape):
            return None
        return int(shape[axis])

    def _shape_of(self, name: str, depth: int = 0) -> list[int] | None:
        if name in self._shapes:
            return self._shapes[name]
        producer = self._producers.get(name)
        if producer is None or producer.op_type not in _SHAPE_PRESERVING or depth > 8:
            return None
        return self._shape_of(producer.input[0], depth + 1)


def _constant_shape(node: onnx.NodeProto) -> list[int] | None:
    for attribute in node.attribute:
        if attribute.name == "value":
            return list(attribute.t.dims)
        if attribute.name in ("value_ints", "value_floats"):
            return [len(attribute.ints) or len(attribute.floats)]
    return None
