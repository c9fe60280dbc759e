"""Symbolic values of shape tensors: what ``Shape -> Gather/Slice -> Unsqueeze -> Concat`` chains compute.

Exporters compute reshape targets at run time from ``Shape`` of some tensor. Shape inference knows most of
those dims, statically or by a symbolic name (``batch``, ``sequence``, ``unk__3``; one name is one value
throughout the model). :func:`propagate` walks the graph once and gives every small integer tensor of the
shape arithmetic a :class:`SymValue`: a scalar or a 1-D list whose elements are dims of
:mod:`gsrewrite.shapes.symdim` (the one symbolic engine):

* an ``int`` (known statically),
* an expression: a dim named by shape inference is the symbol of that name; a dim it left unnamed is a
  symbol of its own (:func:`dim_of`), equal only to itself; arithmetic on them (``Add``, ``Sub``, ``Mul``, an
  exact ``Div``) is symdim's,
* ``None`` — a value not tracked (data-dependent values, arithmetic that cannot be proven exact).

Where a symbol can be read again with a ``Shape`` node is data beside the expressions: :attr:`ShapeValues.origins`
(symbol -> the tensor and axis it was first read from). The passes use these values to fold chains whose
result is static, to write reshape targets as constants (``0`` = keep the input's dim, ``-1`` = the one
remaining dim), and to rebuild the rest with fewer nodes.

Values become constants in the model, so every rule is exact for every size the symbols may take (the
inference rules of :mod:`gsrewrite.shapes.rules` may assume more: a small Slice bound inside a dim, a
floor for ONNX's truncating ``Div``), and integers stay within int64.

Why this is not (yet) a view over the shape engine's walk (:mod:`gsrewrite.shapes.walk`), which tracks the same
tensors: the engine's values are not all exact (see above) and say nothing of which are; it walks ONNX protos once
per model, while these values are wanted for the onnx-graphsurgeon graph as the passes left it (2-3 times per
simplify); and where ONNX's inference named a dim the engine has its own expression (the fixtures' values agree
but for 11 of 1,726 tensors, all in one model, one of them a static dim the engine only has as an expression), so
the folded constants, and the output bytes, would change. This walk costs under 1% of simplify's CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import constant_values
from gsrewrite.graph.evaluate import slice_bounds
from gsrewrite.graph.rewiring import constant_ints, is_standard
from gsrewrite.shapes import symdim
from gsrewrite.shapes.symdim import DimValue, Expr

#: Longest integer vector tracked (shape vectors are short; larger ones are data).
MAX_LENGTH = 16
#: Values an int64 tensor can hold; arithmetic beyond them (which ONNX wraps around) is not tracked.
INT64_RANGE = (-(2**63), 2**63 - 1)
#: The first character of the symbol of a dim shape inference left unnamed (a ``dim_param`` never starts so in
#: practice; the symbol also holds the tensor's ``id``, which no model can know).
_UNNAMED = "\x00"

Element = DimValue | None
Origin = tuple[gs.Tensor, int]


@dataclass(frozen=True)
class SymValue:
    """The value of a scalar (``scalar=True``, one element) or 1-D integer tensor."""

    elements: tuple[Element, ...]
    scalar: bool = False

    @property
    def static(self) -> bool:
        """True when every element is a known int."""
        return all(isinstance(e, int) for e in self.elements)


@dataclass
class ShapeValues:
    """The result of :func:`propagate`: values by tensor id, and where each symbol can be read again."""

    values: dict[int, SymValue] = field(default_factory=dict)
    #: symbol name -> (tensor, axis) of the first ``Shape`` read of it
    origins: dict[str, Origin] = field(default_factory=dict)

    def get(self, tensor: gs.Tensor) -> SymValue | None:
        return self.values.get(id(tensor))

    def __bool__(self) -> bool:
        return bool(self.values)


def dim_of(tensor: gs.Tensor, axis: int) -> DimValue:
    """Dimension ``axis`` of ``tensor``: an int, the symbol shape inference named, or a symbol of its own."""
    d = tensor.shape[axis]
    if isinstance(d, int) and d >= 0:
        return d
    return symdim.sym(d if isinstance(d, str) and d else f"{_UNNAMED}{id(tensor)}:{axis}")


def readable(element: Element) -> bool:
    """True when ``element`` is one dim (a symbol), which a ``Shape`` node can read."""
    return symdim.symbol_name(element) is not None


def named(element: Element) -> str | None:
    """The name shape inference gave the dim ``element`` (``batch``, ``unk__3``), None for anything else."""
    name = symdim.symbol_name(element)
    return None if name is None or name.startswith(_UNNAMED) else name


def propagate(graph: gs.Graph) -> ShapeValues:
    """Symbolic values of the integer tensors computed by ``graph``'s nodes."""
    result = ShapeValues()
    values = result.values

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
        except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError):
            value = None
        if value is not None and len(value.elements) <= MAX_LENGTH:
            values[id(node.outputs[0])] = value
            if node.op == "Shape":
                for axis, element in zip(_shape_axes(node), value.elements, strict=True):
                    name = symdim.symbol_name(element)
                    if name is not None and name not in result.origins:
                        result.origins[name] = (node.inputs[0], axis)
    return result


Lookup = Callable[[gs.Tensor], "SymValue | None"]


def _constant_value(tensor: gs.Constant) -> SymValue | None:
    if len(tensor.shape) > 1 or math.prod(tensor.shape) > MAX_LENGTH:
        return None
    values = constant_values(tensor)
    if values.dtype.kind not in "biu":
        return None
    return SymValue(tuple(int(v) for v in values.reshape(-1)), scalar=len(tensor.shape) == 0)


def _shape_axes(node: gs.Node) -> range:
    """The axes a Shape node reads (its ``start``/``end`` resolved)."""
    rank = len(node.inputs[0].shape)
    start, end = int(node.attrs.get("start", 0)), node.attrs.get("end")
    return range(rank)[slice_bounds(start, rank if end is None else int(end), 1, rank)]


def _shape(node: gs.Node, lookup: Lookup) -> SymValue | None:
    x = node.inputs[0]
    if x.shape is None:
        return None
    return SymValue(tuple(dim_of(x, i) for i in _shape_axes(node)))


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


def _in_int64(value: Element) -> Element:
    return value if not isinstance(value, int) or INT64_RANGE[0] <= value <= INT64_RANGE[1] else None


def _arithmetic(on_ints: Callable[[int, int], int], on_dims: Callable[[DimValue, DimValue], Element]
                ) -> Callable[[gs.Node, Lookup], SymValue | None]:
    """A rule for an arithmetic op: ``on_ints`` on two ints, ``on_dims`` when an operand is an expression (a
    ring operation holds modulo 2**64 too, so ONNX's wrap-around cannot make it wrong)."""
    def apply(x: Element, y: Element) -> Element:
        if x is None or y is None:
            return None
        if isinstance(x, int) and isinstance(y, int):
            return _in_int64(on_ints(x, y))
        try:
            return _in_int64(on_dims(x, y))
        except symdim.ExpressionTooLarge:
            return None

    def rule(node: gs.Node, lookup: Lookup) -> SymValue | None:
        return _elementwise(lookup(node.inputs[0]), lookup(node.inputs[1]), apply)

    return rule


def _div(x: int, y: int) -> int:
    """ONNX's integer division: truncated toward zero."""
    if y == 0:
        raise ValueError("division by zero")
    q = abs(x) // abs(y)
    return -q if (x < 0) != (y < 0) else q


def _div_dims(x: DimValue, y: DimValue) -> Element:
    """``x / y`` where ONNX's truncation is symdim's floor: a sum of dims over a positive int."""
    if not isinstance(y, int) or y <= 0 or not _sum_of_dims(x):
        return None
    return symdim.floor_div(x, y)


#: Largest sum of coefficients :func:`_sum_of_dims` accepts: the value then stays far from int64's limits (a
#: dim below 2**43, the size of a tensor axis, times this is below 2**63), where a wrap-around would change a
#: truncation or a sign
_MAX_COEFFICIENTS = 2**20


def _sum_of_dims(value: DimValue) -> bool:
    """True when ``value`` is a sum of dims (symbols, >= 0) with non-negative coefficients and a small total:
    never negative, never wrapped around."""
    if isinstance(value, int):
        return value >= 0
    total = 0
    for monomial, coefficient in value.terms:
        if coefficient < 0 or len(monomial) > 1 or any(not isinstance(a, symdim.Sym) or p != 1 for a, p in monomial):
            return False
        total += coefficient
    return total <= _MAX_COEFFICIENTS


def _equal(node: gs.Node, lookup: Lookup) -> SymValue | None:
    """Equal on shape values: the same expression is equal; a dim is never negative, so it never equals -1
    (``expand(-1)`` idioms)."""
    def same(x: Element, y: Element) -> Element:
        if x is None or y is None:
            return None
        if x == y:
            return 1
        if isinstance(x, int) and isinstance(y, int):
            return 0
        if _negative_vs_dim(x, y) or _negative_vs_dim(y, x):
            return 0
        return None

    return _elementwise(lookup(node.inputs[0]), lookup(node.inputs[1]), same)


def _negative_vs_dim(x: DimValue, y: DimValue) -> bool:
    return isinstance(x, Expr) and _sum_of_dims(x) and isinstance(y, int) and y < 0


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
    "Add": _arithmetic(lambda x, y: x + y, symdim.add),
    "Sub": _arithmetic(lambda x, y: x - y, symdim.sub),
    "Mul": _arithmetic(lambda x, y: x * y, symdim.mul),
    "Div": _arithmetic(_div, _div_dims),
    "Equal": _equal,
    "Where": _where,
}
