"""Nodes that compute the same thing from the same inputs, and merging them into one.

Two nodes are the same computation when they have the same op (default ONNX domain only: custom ops may
be stateful), attributes and input tensors (in any order for commutative ops). Random ops and nodes holding
subgraphs are never merged. Used by the ``eliminate-common-subexpressions`` pass and by the rewrite engine
(nodes a replacement added that repeat an existing computation).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import constant_values
from gsrewrite.graph.rewiring import disconnect, drop_disconnected, is_standard, replace_uses

COMMUTATIVE = frozenset({"Add", "Mul", "And", "Or", "Xor", "Equal", "Max", "Min", "Sum", "Mean"})
NONDETERMINISTIC = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout",
})


class _Unhashable(Exception):
    pass


def merge_twins(graph: gs.Graph, candidate: Callable[[gs.Node], bool],
                removable: Callable[[gs.Node], bool] = lambda n: True) -> int:
    """Visiting ``graph``'s nodes in order, hand each ``removable`` node's readers to the first ``candidate``
    with the same :func:`node_key` and remove it; nodes writing a graph output stay. Returns the count."""
    outputs = {id(t) for t in graph.outputs}
    seen: dict[Hashable, gs.Node] = {}
    count = 0
    for node in graph.nodes:
        if not candidate(node):
            continue
        key = node_key(node)
        if key is None:
            continue
        first = seen.setdefault(key, node)
        if first is node or not removable(node) or any(id(t) in outputs for t in node.outputs):
            continue
        for mine, theirs in zip(list(node.outputs), first.outputs, strict=True):
            replace_uses(mine, theirs)
        disconnect(node)
        count += 1
    if count:
        drop_disconnected(graph)
    return count


def node_key(node: gs.Node) -> Hashable | None:
    """What makes two nodes the same computation; None for nodes that must never be merged."""
    if node.op in NONDETERMINISTIC or not node.outputs or not is_standard(node):
        return None  # custom ops may be stateful or random: never merged
    try:
        attrs = tuple(sorted((k, _hashable(v)) for k, v in node.attrs.items()))
    except _Unhashable:
        return None
    inputs = [id(t) if t.name else None for t in node.inputs]
    if node.op in COMMUTATIVE:
        inputs = sorted(inputs, key=lambda i: -1 if i is None else i)
    return node.domain or "", node.op, attrs, tuple(inputs), len(node.outputs)


def _hashable(value: Any) -> Hashable:
    if isinstance(value, gs.Graph):
        raise _Unhashable
    if isinstance(value, gs.Constant):
        return _array_key(constant_values(value))
    if isinstance(value, np.ndarray):
        return _array_key(value)
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, float) and value != value:
        return "nan"
    try:
        hash(value)
    except TypeError:
        raise _Unhashable from None
    return type(value).__name__, value


def _array_key(value: np.ndarray) -> Hashable:
    return "array", value.dtype.str, value.shape, value.tobytes()
