"""``merge-squeezes``: two consecutive Squeeze/Unsqueeze nodes become one, or none.

The pair is simulated on labelled dims (``x0, x1, ...`` for the input, ``1`` for inserted dims): when
the result is the input's dims again (``Squeeze(Unsqueeze(x, a), a)``, or ``Unsqueeze(Squeeze(x, a), a)`` of
size-1 axes) the pair is bypassed; when it only
inserts dims it becomes one Unsqueeze, when it only removes dims one Squeeze. Axes must be constant and the
input rank known.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from gsrewrite.graph.core import NameSource
from gsrewrite.graph.rewiring import (
    disconnect_if_unused,
    drop_disconnected,
    forward,
    is_standard,
    normalize_axes,
    operand_ints,
    rank,
    set_operand_ints,
)
from gsrewrite.simplifier.passes.base import SimplifyPass

_OPS = ("Squeeze", "Unsqueeze")
_NEW = "1"


class MergeSqueezes(SimplifyPass):
    name = "merge-squeezes"
    description = "Merge consecutive Squeeze/Unsqueeze nodes (Unsqueeze then Squeeze of the same axes cancels)."

    def apply(self, graph: gs.Graph) -> int:
        opset, names, count = int(graph.opset), None, 0
        for node in graph.nodes:
            first = _squeeze_input(node)
            if first is None:
                continue
            x = first.inputs[0]
            labels = _simulate(_simulate(_labels(x), first, opset), node, opset) if rank(x) is not None else None
            if labels is None:
                continue
            names = names or NameSource(graph)
            if _rewrite(graph, node, x, labels, opset, names):
                disconnect_if_unused(first, graph)
                count += 1
        if count:
            drop_disconnected(graph)
        return count


def _squeeze_input(node: gs.Node) -> gs.Node | None:
    if node.op not in _OPS or not is_standard(node) or not node.outputs:
        return None
    src = node.inputs[0]
    first = src.inputs[0] if isinstance(src, gs.Variable) and src.inputs else None
    return first if first is not None and first.op in _OPS and is_standard(first) else None


def _labels(x: gs.Tensor) -> list[str] | None:
    return None if x.shape is None else [f"x{i}" for i in range(len(x.shape))]


def _simulate(labels: list[str] | None, node: gs.Node, opset: int) -> list[str] | None:
    """The labels after ``node``; None when its axes are unknown or invalid."""
    axes = operand_ints(node, "axes", 1, 13, opset)
    if labels is None or axes is None:
        return None
    if node.op == "Squeeze":
        positions = normalize_axes(axes, len(labels))
        return None if positions is None else [lab for i, lab in enumerate(labels) if i not in positions]
    out_rank = len(labels) + len(axes)
    positions = normalize_axes(axes, out_rank)
    if positions is None or len(set(positions)) != len(positions):
        return None
    rest = iter(labels)
    return [_NEW if i in positions else next(rest) for i in range(out_rank)]


def _same_dims(labels: list[str], original: list[str], x: gs.Tensor) -> bool:
    """The pair gives back x's own shape: every removed dim of static size 1 is inserted again at its place
    (``Unsqueeze(Squeeze(x, a), a)`` of a size-1 axis)."""
    if len(labels) != len(original) or x.shape is None:
        return False
    return all(lab == orig or (lab == _NEW and orig not in labels and x.shape[i] == 1)
               for i, (lab, orig) in enumerate(zip(labels, original, strict=True)))


def _rewrite(graph: gs.Graph, node: gs.Node, x: gs.Tensor, labels: list[str], opset: int,
             names: NameSource) -> bool:
    original = _labels(x) or []
    kept = [lab for lab in labels if lab != _NEW]
    if labels == original or _same_dims(labels, original, x):
        return forward(graph, node, x, node.outputs[0])
    if kept == original:  # only insertions
        op, axes = "Unsqueeze", [i for i, lab in enumerate(labels) if lab == _NEW]
    elif len(kept) == len(labels) and all(lab in original for lab in kept):  # only removals
        op, axes = "Squeeze", [i for i, lab in enumerate(original) if lab not in kept]
    else:
        return False
    node.op = op
    node.inputs[0] = x
    while len(node.inputs) > 1:
        node.inputs.pop()
    node.attrs.pop("axes", None)
    set_operand_ints(node, "axes", 1, 13, opset, axes, names(f"{node.name or op}_axes"))
    return True
