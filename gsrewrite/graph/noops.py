"""Nodes that return their input unchanged are bypassed (the ``eliminate-noops`` simplify pass, and
canonicalization before matching).

Each rule below proves that a node is the identity on its data input, from constants and from the shapes
shape inference found (static sizes, or the same symbolic dim names): Identity, inference-mode Dropout,
Cast to the type the input already has, Transpose with the identity permutation, Reshape/Expand/Flatten/
Squeeze/Unsqueeze/Tile whose output shape is the input shape, Slice that keeps every element, Pad by zero,
Concat of one input, Split into one output, single-input Sum/Max/Min/Mean, and ``x * 1``, ``x / 1``,
``x + 0``, ``x - 0``, ``x ** 1``, ``x and true``, ``x or false``, ``x xor false`` when the constant cannot
broadcast ``x`` to a larger shape and has its dtype. (``-0.0 + 0`` is ``+0.0``: equal, though not bitwise;
everything else is exact.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import is_empty
from gsrewrite.graph.rewiring import (
    constant,
    constant_ints,
    drop_disconnected,
    forward,
    is_standard,
    np_dtype,
    only_output_used,
    operand_ints,
    rank,
    same_shape,
)

Rule = Callable[[gs.Node, gs.Graph, int], gs.Tensor | None]
#: Slice ends at or beyond this are "to the end" (exporters write INT32_MAX or INT64_MAX).
_TO_END = 2**31 - 1


#: What the ``eliminate-noops`` pass reports about itself.
DESCRIPTION = ("Bypass nodes that change nothing: Identity, inference Dropout, same-type Cast, identity "
               "Transpose/Reshape/Expand/Slice/Pad/Concat/Split, x*1, x/1, x+0, x-0.")


def bypass_noops(graph: gs.Graph) -> int:
    """Bypass every node of ``graph`` (top level) that a rule proves is the identity; returns the count."""
    opset = int(graph.opset)
    count = 0
    for node in list(graph.nodes):
        rule = RULES.get(node.op)
        if rule is None or not is_standard(node) or not node.outputs or not only_output_used(node, graph):
            continue
        src = rule(node, graph, opset)
        if src is not None and not is_empty(src) and forward(graph, node, src, node.outputs[0]):
            count += 1
    if count:
        drop_disconnected(graph)
    return count


def _first(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    return node.inputs[0] if node.inputs else None


def _dropout(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    if opset < 7 and not node.attrs.get("is_test", 0):
        return None
    if len(node.inputs) > 2 and not is_empty(node.inputs[2]):
        training = constant(node.inputs[2])
        if training is None or bool(np.any(training)):
            return None
    return node.inputs[0]


def _cast(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    src = node.inputs[0]
    dtype = np_dtype(src)
    try:
        target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attrs["to"])))
    except (KeyError, TypeError, ValueError):
        return None
    return src if dtype is not None and dtype == target else None


def _transpose(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    perm = node.attrs.get("perm")
    if perm is None:
        return node.inputs[0] if rank(node.inputs[0]) in (0, 1) else None
    return node.inputs[0] if list(perm) == list(range(len(perm))) else None


def _same_shape(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    src = node.inputs[0]
    return src if same_shape(src, node.outputs[0]) else None


def _reshape(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    src = node.inputs[0]
    if same_shape(src, node.outputs[0]):
        return src
    target = constant_ints(node.inputs[1]) if len(node.inputs) > 1 else None
    if target is None or src.shape is None or len(target) != len(src.shape) or node.attrs.get("allowzero", 0):
        return None
    unresolved = [i for i, (t, d) in enumerate(zip(target, src.shape, strict=True)) if not (t == 0 or t == d)]
    return src if not unresolved or (len(unresolved) == 1 and target[unresolved[0]] == -1) else None


def _expand(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    src = node.inputs[0]
    if same_shape(src, node.outputs[0]):
        return src
    shape, r = constant_ints(node.inputs[1]), rank(src)
    return src if shape is not None and r is not None and len(shape) <= r and all(d == 1 for d in shape) else None


def _tile(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    repeats = constant_ints(node.inputs[1])
    return node.inputs[0] if repeats is not None and all(r == 1 for r in repeats) else _same_shape(node, graph, opset)


def _slice(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    src = node.inputs[0]
    if src.shape is None:
        return None
    if opset >= 10:
        starts, ends = constant_ints(node.inputs[1]), constant_ints(node.inputs[2])
        axes = constant_ints(node.inputs[3]) if len(node.inputs) > 3 and not is_empty(node.inputs[3]) else None
        steps = constant_ints(node.inputs[4]) if len(node.inputs) > 4 and not is_empty(node.inputs[4]) else None
        if starts is None or ends is None or (len(node.inputs) > 3 and not is_empty(node.inputs[3]) and axes is None):
            return None
        if len(node.inputs) > 4 and not is_empty(node.inputs[4]) and steps is None:
            return None
    else:
        starts, ends, axes, steps = list(node.attrs["starts"]), list(node.attrs["ends"]), node.attrs.get("axes"), None
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else steps
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        dim = src.shape[axis] if -len(src.shape) <= axis < len(src.shape) else None
        size = dim if isinstance(dim, int) and dim >= 0 else None  # a negative declared dim (-1) is unknown
        if step != 1 or not (start == 0 or (size is not None and start == -size)):
            return None
        if not (end >= _TO_END or (size is not None and end >= size)):
            return None
    return src


def _pad(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    pads = operand_ints(node, "pads", 1, 11, opset)
    return node.inputs[0] if pads is not None and not any(pads) else None


def _single_input(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    return node.inputs[0] if len(node.inputs) == 1 else None


def _split(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
    return node.inputs[0] if len(node.outputs) == 1 else None


def _unit(unit: float, commutative: bool) -> Rule:
    """``x op unit`` (and ``unit op x`` when ``commutative``) is ``x``."""
    def rule(node: gs.Node, graph: gs.Graph, opset: int) -> gs.Tensor | None:
        if len(node.inputs) != 2:
            return None
        pairs = [(0, 1), (1, 0)] if commutative else [(0, 1)]
        for data, other in pairs:
            x, value = node.inputs[data], constant(node.inputs[other])
            if value is not None and _neutral(x, value, unit):
                return x
        return None

    return rule


def _neutral(x: gs.Tensor, value: np.ndarray, unit: float) -> bool:
    if np_dtype(x) != value.dtype or x.shape is None or value.ndim > len(x.shape):
        return False
    aligned = x.shape[len(x.shape) - value.ndim:]
    if any(d != 1 and d != xd for d, xd in zip(value.shape, aligned, strict=True)):
        return False  # the constant would broadcast x to a larger shape
    return bool(np.all(value == unit))


RULES: dict[str, Rule] = {
    "Identity": _first,
    "Dropout": _dropout,
    "Cast": _cast,
    "Transpose": _transpose,
    "Reshape": _reshape,
    "Expand": _expand,
    "Tile": _tile,
    "Flatten": _same_shape,
    "Squeeze": _same_shape,
    "Unsqueeze": _same_shape,
    "Slice": _slice,
    "Pad": _pad,
    "Concat": _single_input,
    "Sum": _single_input,
    "Max": _single_input,
    "Min": _single_input,
    "Mean": _single_input,
    "Split": _split,
    # a reduction whose output has the input's shape (keepdims over size-1 axes) is the identity; for
    # L1/L2/LogSumExp/SumSquare it is not, so they are not listed
    **dict.fromkeys(("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd"), _same_shape),
    "Mul": _unit(1, commutative=True),
    "Add": _unit(0, commutative=True),
    "Sub": _unit(0, commutative=False),
    "Div": _unit(1, commutative=False),
    "Pow": _unit(1, commutative=False),
    "And": _unit(True, commutative=True),
    "Or": _unit(False, commutative=True),
    "Xor": _unit(False, commutative=True),
}
