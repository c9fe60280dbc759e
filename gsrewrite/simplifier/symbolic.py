"""Symbolic values of shape tensors: what ``Shape -> Gather/Slice -> Unsqueeze -> Concat`` chains compute.

Exporters compute reshape targets at run time from ``Shape`` of some tensor. Shape inference knows most of
those dims, statically or by a symbolic name (``batch``, ``sequence``, ``unk__3``; one name is one value
throughout the model). :func:`propagate` walks the graph once and gives every small integer tensor of the
shape arithmetic a :class:`SymValue`: a scalar or a 1-D list whose elements are

* an ``int`` (known statically),
* a :class:`Dim` — a symbolic dim, equal to another Dim exactly when their keys are equal; it remembers
  where it was read (``origin``: a tensor and an axis), so that it can be read again with a ``Shape`` node,
* ``None`` — a value we do not track (arithmetic on symbols, data-dependent values).

The passes use these values to fold chains whose result is static, to write reshape targets as constants
(``0`` = keep the input's dim, ``-1`` = the one remaining dim), and to rebuild the rest with fewer nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import constant_values
from gsrewrite.graph.evaluate import slice_bounds
from gsrewrite.graph.rewiring import constant_ints, is_standard

#: Longest integer vector tracked (shape vectors are short; larger ones are data).
MAX_LENGTH = 16
#: Values an int64 tensor can hold; arithmetic beyond them (which ONNX wraps around) is not tracked.
INT64_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Dim:
    """A symbolic dimension; ``origin`` (tensor, axis) says where it can be read with ``Shape``."""

    key: Hashable
    origin: tuple[gs.Tensor, int] | None = field(default=None, compare=False, hash=False)


Element = int | Dim | None


@dataclass(frozen=True)
class SymValue:
    """The value of a scalar (``scalar=True``, one element) or 1-D integer tensor."""

    elements: tuple[Element, ...]
    scalar: bool = False

    @property
    def static(self) -> bool:
        """True when every element is a known int."""
        return all(isinstance(e, int) for e in self.elements)


def dim_of(tensor: gs.Tensor, axis: int) -> Element:
    """Dimension ``axis`` of ``tensor``: an int, a Dim named by shape inference, or a Dim of its own."""
    d = tensor.shape[axis]
    if isinstance(d, int) and d >= 0:
        return d
    key: Hashable = ("name", d) if isinstance(d, str) and d else ("tensor", id(tensor), axis)
    return Dim(key, (tensor, axis))


def propagate(graph: gs.Graph) -> dict[int, SymValue]:
    """Symbolic values of the integer tensors computed by ``graph``'s nodes, by tensor id."""
    values: dict[int, SymValue] = {}

    def lookup(tensor: gs.Tensor) -> SymValue | None:
        if isinstance(tensor, gs.Constant):
            return _constant_value(tensor)
        return values.get(id(tensor))

    for node in graph.nodes:
        rule = _RULES.get(node.op)
        if rule is None or not is_standard(node) or len(node.outputs) != 1:
            continue
        try:
            value = rule(node, lookup)
        except (IndexError, KeyError, TypeError, ValueError):
            value = None
        if value is not None and len(value.elements) <= MAX_LENGTH:
            values[id(node.outputs[0])] = value
    return values


Lookup = Callable[[gs.Tensor], "SymValue | None"]


def _constant_value(tensor: gs.Constant) -> SymValue | None:
    if len(tensor.shape) > 1 or math.prod(tensor.shape) > MAX_LENGTH:
        return None
    values = constant_values(tensor)
    if values.dtype.kind not in "biu":
        return None
    return SymValue(tuple(int(v) for v in values.reshape(-1)), scalar=len(tensor.shape) == 0)


def _shape(node: gs.Node, lookup: Lookup) -> SymValue | None:
    x = node.inputs[0]
    if x.shape is None:
        return None
    rank = len(x.shape)
    start, end = int(node.attrs.get("start", 0)), node.attrs.get("end")
    bounds = slice_bounds(start, rank if end is None else int(end), 1, rank)
    return SymValue(tuple(dim_of(x, i) for i in range(rank)[bounds]))


def _small_ints(tensor: gs.Tensor) -> list[int] | None:
    """``constant_ints`` of a constant short enough to be a shape operand (a large one is not read)."""
    if isinstance(tensor, gs.Constant) and math.prod(tensor.shape) > MAX_LENGTH:
        return None
    return constant_ints(tensor)


def _gather(node: gs.Node, lookup: Lookup) -> SymValue | None:
    data, indices = lookup(node.inputs[0]), _small_ints(node.inputs[1])
    if data is None or data.scalar or indices is None or int(node.attrs.get("axis", 0)) not in (0, -1):
        return None
    picked = tuple(data.elements[i] for i in indices)
    return SymValue(picked, scalar=len(node.inputs[1].shape) == 0)


def _slice(node: gs.Node, lookup: Lookup) -> SymValue | None:
    data = lookup(node.inputs[0])
    starts, ends = _small_ints(node.inputs[1]), _small_ints(node.inputs[2])
    steps = _small_ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4].name else [1]
    if data is None or data.scalar or starts is None or ends is None or steps is None or len(starts) != 1:
        return None
    return SymValue(data.elements[slice_bounds(starts[0], ends[0], steps[0], len(data.elements))])


def _unsqueeze(node: gs.Node, lookup: Lookup) -> SymValue | None:
    data = lookup(node.inputs[0])
    axes = _small_ints(node.inputs[1]) if len(node.inputs) > 1 else node.attrs.get("axes")
    if data is None or not data.scalar or axes is None or list(axes) not in ([0], [-1]):
        return None
    return SymValue(data.elements)


def _squeeze(node: gs.Node, lookup: Lookup) -> SymValue | None:
    data = lookup(node.inputs[0])
    if data is None or data.scalar or len(data.elements) != 1:
        return None
    return SymValue(data.elements, scalar=True)


def _concat(node: gs.Node, lookup: Lookup) -> SymValue | None:
    parts = [lookup(t) for t in node.inputs]
    if any(p is None or p.scalar for p in parts):
        return None
    return SymValue(tuple(e for p in parts for e in p.elements))  # type: ignore[union-attr]


def _passthrough(node: gs.Node, lookup: Lookup) -> SymValue | None:
    out = node.outputs[0]
    if out.dtype is None or np.dtype(out.dtype).kind not in "iu":
        return None
    return lookup(node.inputs[0])


def _reshape(node: gs.Node, lookup: Lookup) -> SymValue | None:
    data, target = lookup(node.inputs[0]), _small_ints(node.inputs[1])
    if data is None or target is None or len(target) > 1:
        return None
    if not target:
        return SymValue(data.elements, scalar=True) if len(data.elements) == 1 else None
    return SymValue(data.elements) if target[0] in (-1, len(data.elements)) else None


def _arithmetic(fn: Callable[[int, int], int]) -> Callable[[gs.Node, Lookup], SymValue | None]:
    def on_ints(x: Element, y: Element) -> Element:
        if not isinstance(x, int) or not isinstance(y, int):
            return None
        value = fn(x, y)
        return value if INT64_RANGE[0] <= value <= INT64_RANGE[1] else None

    def rule(node: gs.Node, lookup: Lookup) -> SymValue | None:
        return _elementwise(lookup(node.inputs[0]), lookup(node.inputs[1]), on_ints)

    return rule


def _equal(node: gs.Node, lookup: Lookup) -> SymValue | None:
    """Equal on shape values; a dim is never negative, so it never equals -1 (``expand(-1)`` idioms)."""
    def same(x: Element, y: Element) -> Element:
        if isinstance(x, int) and isinstance(y, int):
            return int(x == y)
        if isinstance(x, Dim) and isinstance(y, Dim) and x == y:
            return 1
        if _negative_vs_dim(x, y) or _negative_vs_dim(y, x):
            return 0
        return None

    return _elementwise(lookup(node.inputs[0]), lookup(node.inputs[1]), same)


def _negative_vs_dim(x: Element, y: Element) -> bool:
    return isinstance(x, Dim) and isinstance(y, int) and y < 0


def _where(node: gs.Node, lookup: Lookup) -> SymValue | None:
    cond, a, b = (lookup(t) for t in node.inputs)
    if cond is None or a is None or b is None:
        return None
    n = max(len(cond.elements), len(a.elements), len(b.elements))
    if {len(cond.elements), len(a.elements), len(b.elements)} - {1, n}:
        return None
    out = tuple(None if not isinstance(c, int) else (x if c else y)
                for c, x, y in zip(_broadcast(cond, n), _broadcast(a, n), _broadcast(b, n), strict=True))
    return SymValue(out, scalar=cond.scalar and a.scalar and b.scalar)


def _broadcast(value: SymValue, n: int) -> tuple[Element, ...]:
    return value.elements * (n // len(value.elements))


def _elementwise(a: SymValue | None, b: SymValue | None,
                 fn: Callable[[Element, Element], Element]) -> SymValue | None:
    if a is None or b is None:
        return None
    n = max(len(a.elements), len(b.elements))
    if {len(a.elements), len(b.elements)} - {1, n}:
        return None
    out = tuple(fn(x, y) for x, y in zip(_broadcast(a, n), _broadcast(b, n), strict=True))
    return SymValue(out, scalar=a.scalar and b.scalar)


def _div(x: int, y: int) -> int:
    if y == 0:
        raise ValueError("division by zero")
    q = abs(x) // abs(y)
    return -q if (x < 0) != (y < 0) else q


_RULES: dict[str, Callable[[gs.Node, Lookup], SymValue | None]] = {
    "Shape": _shape,
    "Gather": _gather,
    "Slice": _slice,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Cast": _passthrough,
    "Identity": _passthrough,
    "Reshape": _reshape,
    "Add": _arithmetic(lambda x, y: x + y),
    "Sub": _arithmetic(lambda x, y: x - y),
    "Mul": _arithmetic(lambda x, y: x * y),
    "Div": _arithmetic(_div),
    "Equal": _equal,
    "Where": _where,
}
