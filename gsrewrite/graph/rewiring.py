"""Graph edits and queries shared by the simplify passes: forwarding a tensor, removing nodes, constants.

Every edit here respects scopes: a pass may run on an If/Loop/Scan body, whose nodes can read tensors of
the enclosing graphs; those outer tensors (and their producers) are never rewired from inside the body.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import constant_values, swap

DEFAULT_DOMAINS = (None, "", "ai.onnx")


def is_standard(node: gs.Node) -> bool:
    """True for a node of the default ONNX domain."""
    return node.domain in DEFAULT_DOMAINS


def forward(graph: gs.Graph, node: gs.Node, src: gs.Tensor, dst: gs.Tensor) -> bool:
    """Make the readers of ``dst`` (an output of ``node``) read ``src`` instead, and disconnect ``node``.

    When ``dst`` is a graph output its name must survive, so the local producer of ``src`` writes ``dst``
    directly; that is impossible (and False is returned, nothing changed) when ``src`` is a graph input, a
    constant, another graph output, or comes from an enclosing graph. The caller removes disconnected nodes
    (:func:`drop_disconnected`).
    """
    if id(dst) in {id(t) for t in graph.outputs}:
        producer = src.inputs[0] if isinstance(src, gs.Variable) and src.inputs else None
        if (producer is None or not _is_local(graph, producer) or contains(graph.outputs, src)
                or contains(graph.inputs, src)):
            return False
        disconnect(node)
        replace_uses(src, dst)
        swap(producer.outputs, src, dst)
        return True
    disconnect(node)
    replace_uses(dst, src)
    return True


def contains(tensors: Iterable[gs.Tensor], tensor: gs.Tensor) -> bool:
    """Identity membership (gs tensors compare equal by name, and every omitted input is named '')."""
    return any(t is tensor for t in tensors)


def _is_local(graph: gs.Graph, node: gs.Node) -> bool:
    return any(n is node for n in graph.nodes)


def disconnect(node: gs.Node) -> None:
    """Detach ``node`` from every tensor (it then reads and writes nothing).

    Same effect as ``node.inputs.clear(); node.outputs.clear()``, but the back-references are removed by
    identity: onnx-graphsurgeon removes them with ``list.remove``, which compares nodes with ``==`` (names,
    attributes, inputs...), a cost that dominates passes removing hundreds of nodes.
    """
    for tensor in node.inputs:
        _remove_identical(tensor.outputs, node)
    for tensor in node.outputs:
        _remove_identical(tensor.inputs, node)
    list.clear(node.inputs)
    list.clear(node.outputs)


def replace_uses(old: gs.Tensor, new: gs.Tensor) -> None:
    """Make every reader of ``old`` read ``new`` instead (readers in subgraphs included).

    :func:`gsrewrite.graph.core.replace_uses` with the back-references updated by identity (see
    :func:`disconnect`).
    """
    if old is new:
        return
    for node in list(old.outputs):
        for i, tensor in enumerate(node.inputs):
            if tensor is old:
                list.__setitem__(node.inputs, i, new)
                _remove_identical(old.outputs, node)
                list.append(new.outputs, node)


def _remove_identical(items: list, item: object) -> None:
    for i, candidate in enumerate(items):
        if candidate is item:
            list.__delitem__(items, i)
            return


def disconnect_if_unused(node: gs.Node, graph: gs.Graph) -> None:
    """Disconnect ``node`` when nothing reads its outputs any more (a merge made it redundant)."""
    outputs = {id(t) for t in graph.outputs}
    if all(not t.outputs and id(t) not in outputs for t in node.outputs):
        disconnect(node)


def drop_disconnected(graph: gs.Graph) -> None:
    """Remove the nodes that write nothing any more (disconnected by a rewrite)."""
    graph.nodes = [n for n in graph.nodes if n.outputs]


def only_output_used(node: gs.Node, graph: gs.Graph, index: int = 0) -> bool:
    """True when no output of ``node`` other than ``index`` is read or is a graph output."""
    outputs = {id(t) for t in graph.outputs}
    return all(not t.outputs and id(t) not in outputs for i, t in enumerate(node.outputs) if i != index)


def sole_reader(tensor: gs.Tensor, node: gs.Node, graph: gs.Graph) -> bool:
    """True when ``node`` is the only reader of ``tensor`` and it is not a graph output."""
    return all(c is node for c in tensor.outputs) and not contains(graph.outputs, tensor)


def constant(tensor: gs.Tensor | None) -> np.ndarray | None:
    """The value of a constant tensor, else None."""
    return constant_values(tensor) if isinstance(tensor, gs.Constant) else None


def constant_ints(tensor: gs.Tensor | None) -> list[int] | None:
    """The values of an integer constant as a flat list, else None."""
    value = constant(tensor)
    if value is None or value.dtype.kind not in "iu":
        return None
    return [int(v) for v in value.reshape(-1)]


def operand_ints(node: gs.Node, attr: str, index: int, since: int, opset: int) -> list[int] | None:
    """An integer operand that moved from attribute ``attr`` to input ``index`` at opset ``since``.

    Returns None when it is absent or not constant.
    """
    if opset >= since:
        return constant_ints(node.inputs[index]) if len(node.inputs) > index else None
    value = node.attrs.get(attr)
    return None if value is None else [int(v) for v in value]


def set_operand_ints(node: gs.Node, attr: str, index: int, since: int, opset: int, values: Iterable[int],
                     name: str) -> None:
    """Write an integer operand in the spelling of ``opset`` (a new constant called ``name``, or an attribute)."""
    values = [int(v) for v in values]
    if opset < since:
        node.attrs[attr] = values
        return
    while len(node.inputs) <= index:
        node.inputs.append(gs.Variable.empty())
    node.inputs[index] = gs.Constant(name, np.array(values, dtype=np.int64))


def same_shape(a: gs.Tensor, b: gs.Tensor) -> bool:
    """True when both shapes are known and provably equal (static sizes, or the same symbolic names)."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    return all(dims_equal(x, y) for x, y in zip(a.shape, b.shape, strict=True))


def dims_equal(x: object, y: object) -> bool:
    """True when two dims are provably equal: the same size, or the same (non-empty) symbolic name."""
    if isinstance(x, int) and isinstance(y, int):
        return x == y and x >= 0
    return isinstance(x, str) and isinstance(y, str) and bool(x) and x == y


def rank(tensor: gs.Tensor) -> int | None:
    """The rank of ``tensor`` when known."""
    return None if tensor.shape is None else len(tensor.shape)


def normalize_axes(axes: Iterable[int], rank_: int) -> list[int] | None:
    """Axes made non-negative for a tensor of rank ``rank_``; None when one is out of range."""
    out = [a + rank_ if a < 0 else a for a in axes]
    return out if all(0 <= a < rank_ for a in out) else None


def np_dtype(tensor: gs.Tensor) -> np.dtype | None:
    """The numpy dtype of ``tensor`` when known."""
    if tensor.dtype is None:
        return None
    try:
        return np.dtype(tensor.dtype)
    except TypeError:
        return None


class ConstantPool:
    """Small constants, one tensor per distinct value: the graph's own small constants are reused (so that
    new ones need no deduplication afterwards)."""

    #: Constants of at most this many elements are looked up among the graph's.
    SMALL = 16

    def __init__(self, names: Callable[[str], str], graph: gs.Graph | None = None) -> None:
        self._names = names
        self._made: dict[tuple, gs.Constant] = {}
        self._graph = graph  # adopted on first use

    def _adopt(self, graph: gs.Graph) -> None:
        local = {id(n) for n in graph.nodes}
        seen: set[int] = set()
        for node in graph.nodes:
            for tensor in node.inputs:
                if id(tensor) in seen:  # a constant read by k nodes: its readers are checked once, not k times
                    continue
                seen.add(id(tensor))
                if (isinstance(tensor, gs.Constant) and len(tensor.shape) <= 1 and math.prod(tensor.shape) <= self.SMALL
                        and all(id(c) in local for c in tensor.outputs)):
                    value = constant_values(tensor)
                    self._made.setdefault((value.dtype.str, value.shape, value.tobytes()), tensor)

    def get(self, value: np.ndarray, name: str) -> gs.Constant:
        """A constant holding ``value`` (named after ``name`` when it is new)."""
        if self._graph is not None:
            self._adopt(self._graph)
            self._graph = None
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self._made:
            self._made[key] = gs.Constant(self._names(name), value)
        return self._made[key]
