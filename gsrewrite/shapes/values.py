"""The values of the small tensors exporters compute shapes with, for :mod:`gsrewrite.shapes.rules`.

A tracked value is the tensor's elements: one element for a scalar, a flat row-major list otherwise (its shape
is the tensor's, static, of at most :data:`MAX_VALUE_LENGTH` elements). An element is

* an ``int`` or a :mod:`~gsrewrite.shapes.symdim` expression: a size or index (``Shape(x)[2]`` is ``height``);
* a :class:`Frac`: the exact value of float shape arithmetic that is not an integer (``Cast(height) / 2``, the
  ``ceil(h / stride)`` of "same" padding, a Resize scale ``out / in``), floored, ceiled or truncated back into
  an integer later;
* ``None``: unknown.

Booleans are 0 and 1. Arithmetic follows ONNX: integer ``Div`` truncates, ``Mod`` takes the divisor's sign,
``Cast`` from float truncates; symbols are sizes (>= 0), so a symbolic quotient floors. Nothing here raises on
odd input: an element that cannot be computed is ``None``.

Where an element holds only for some sizes (a truncating ``Div`` taken as a floor when the numerator might be
negative, a symbolic divisor taken as nonzero, a symbolic size cast to float taken as exact, an integer past int64
where ONNX wraps around) it goes through :func:`assumed`: the walk then marks the tensor's value as not proven for
every size (:attr:`gsrewrite.shapes.rules.Info.exact`), and under :func:`proving` the element is unknown instead
(the simplifier's values become constants: :mod:`gsrewrite.shapes.graph_values`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

import numpy as np
from onnx import TensorProto

from gsrewrite.shapes import symdim
from gsrewrite.shapes.symdim import DimValue, Expr

#: longest tensor whose value is tracked (elements)
MAX_VALUE_LENGTH = 64


@dataclass(frozen=True, slots=True)
class Frac:
    """``num / den``, not an integer; ``den`` is an int > 1 or an expression (a size, > 0)."""

    num: DimValue
    den: DimValue

    def __str__(self) -> str:
        return f"({symdim.text(self.num)})/({symdim.text(self.den)})"

    def __float__(self) -> float:
        if isinstance(self.num, int) and isinstance(self.den, int):
            return self.num / self.den
        raise TypeError("a symbolic fraction has no float value")


Number = DimValue | Frac
Element = Number | None
#: a tracked value: one element (a scalar) or a flat list of elements
Value = Element | list[Element]

_INT_TYPES = frozenset({TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT8,
                        TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL})
#: largest integer each float type holds exactly (a Cast of a larger one is not tracked)
_FLOAT_EXACT: dict[int, int] = {TensorProto.FLOAT: 2**24, TensorProto.DOUBLE: 2**53, TensorProto.FLOAT16: 2**11,
                TensorProto.BFLOAT16: 2**8}


#: Values an int64 tensor holds; an integer past them (which ONNX wraps around) is an assumption
INT64_RANGE = (-(2**63), 2**63 - 1)
#: Largest sum of coefficients a numerator may have for a truncating ``Div`` to be a floor for every size: the value
#: stays far from int64's limits (a dim below 2**43, the size of a tensor axis, times this is below 2**63), where a
#: wrap-around would change a truncation or a sign
MAX_COEFFICIENTS = 2**20


_T = TypeVar("_T")


class _Proof(threading.local):
    """Per thread: whether an assumption gives an unknown element (:func:`proving`), and whether one was made."""

    strict = False
    made = False


_PROOF = _Proof()


def assumed(value: _T) -> _T | None:
    """``value``, which holds only for some sizes: noted (the walk marks the tensor's value inexact), or None
    under :func:`proving`."""
    if _PROOF.strict:
        return None
    _PROOF.made = True
    return value


@contextlib.contextmanager
def proving() -> Iterator[None]:
    """Within: every assumption gives an unknown element, so every value computed is proven for every size."""
    before = _PROOF.strict
    _PROOF.strict = True
    try:
        yield
    finally:
        _PROOF.strict = before


def start_assumptions() -> None:
    """Forget the assumptions noted so far (the walk calls it before each node)."""
    _PROOF.made = False


def assumptions_made() -> bool:
    """Whether an assumption was noted since :func:`start_assumptions`."""
    return _PROOF.made


def sum_of_dims(value: DimValue) -> bool:
    """True when ``value`` is a sum of dims (symbols, >= 0) with non-negative coefficients and a small total:
    never negative, never wrapped around."""
    if isinstance(value, int):
        return value >= 0
    total = 0
    for monomial, coefficient in value.terms:
        if coefficient < 0 or len(monomial) > 1 or any(not isinstance(a, symdim.Sym) or p != 1 for a, p in monomial):
            return False
        total += coefficient
    return total <= MAX_COEFFICIENTS


def is_int_type(dtype: int) -> bool:
    return dtype in _INT_TYPES


def is_float_type(dtype: int) -> bool:
    return dtype in _FLOAT_EXACT


# numbers -------------------------------------------------------------------------------------------
def _parts(x: Number) -> tuple[DimValue, DimValue]:
    return (x.num, x.den) if isinstance(x, Frac) else (x, 1)


def ratio(num: DimValue, den: DimValue) -> Element:
    """``num / den`` as an int, an expression when it divides exactly, else a :class:`Frac`."""
    if isinstance(den, int):
        if den == 0:
            return None
        if isinstance(num, int):
            value = Fraction(num, den)
            return value.numerator if value.denominator == 1 else Frac(value.numerator, value.denominator)
        if den < 0:
            num, den = symdim.mul(num, -1), -den
        assert isinstance(num, Expr)
        common = math.gcd(den, *(c for _, c in num.terms))
        if common > 1:
            num, den = symdim.floor_div(num, common), den // common  # exact: common divides every coefficient
        return num if den == 1 else Frac(num, den)
    quotient = symdim.floor_div(num, den)  # (a symbolic divisor is a size taken as > 0)
    if symdim.sub(symdim.mul(quotient, den), num) == 0:
        return assumed(quotient)
    return assumed(Frac(num, den))


def add(a: Number, b: Number) -> Element:
    if not isinstance(a, Frac) and not isinstance(b, Frac):
        return symdim.add(a, b)
    (p, q), (r, s) = _parts(a), _parts(b)
    if q == s:
        return ratio(symdim.add(p, r), q)
    return ratio(symdim.add(symdim.mul(p, s), symdim.mul(r, q)), symdim.mul(q, s))


def neg(a: Number) -> Element:
    return Frac(symdim.mul(a.num, -1), a.den) if isinstance(a, Frac) else symdim.mul(a, -1)


def sub(a: Number, b: Number) -> Element:
    minus = neg(b)
    return None if minus is None else add(a, minus)


def mul(a: Number, b: Number) -> Element:
    if not isinstance(a, Frac) and not isinstance(b, Frac):
        return symdim.mul(a, b)
    (p, q), (r, s) = _parts(a), _parts(b)
    return ratio(symdim.mul(p, r), symdim.mul(q, s))


def true_div(a: Number, b: Number) -> Element:
    """Float division (``b`` a nonzero number; a symbolic divisor is a size, > 0)."""
    (p, q), (r, s) = _parts(a), _parts(b)
    return ratio(symdim.mul(p, s), symdim.mul(q, r))


def int_div(a: DimValue, b: DimValue) -> Element:
    """ONNX's integer Div: truncated toward zero (symbols are sizes: floored)."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            return None
        quotient = abs(a) // abs(b)
        return quotient if (a >= 0) == (b > 0) else -quotient
    floored = symdim.floor_div(a, b)
    # truncation is the floor for a numerator that is never negative over a positive constant
    return floored if isinstance(b, int) and b > 0 and sum_of_dims(a) else assumed(floored)


def floor(a: Number) -> Element:
    if not isinstance(a, Frac):
        return a
    floored = symdim.floor_div(a.num, a.den)
    return floored if isinstance(a.den, int) else assumed(floored)


def ceil(a: Number) -> Element:
    if not isinstance(a, Frac):
        return a
    ceiled = symdim.ceil_div(a.num, a.den)
    return ceiled if isinstance(a.den, int) else assumed(ceiled)


def trunc(a: Number) -> Element:
    """A Cast from float to an integer type (a symbolic fraction is of sizes: >= 0, floored)."""
    if not isinstance(a, Frac):
        return a
    if isinstance(a.num, int) and isinstance(a.den, int):
        return int(Fraction(a.num, a.den))
    return assumed(symdim.floor_div(a.num, a.den))  # (a floor: the fraction taken as >= 0)


def round_half_even(a: Number) -> Element:
    if not isinstance(a, Frac):
        return a
    if isinstance(a.num, int) and isinstance(a.den, int):
        return round(Fraction(a.num, a.den))
    return None


def _difference_sign(a: Number, b: Number) -> int | None:
    """The sign of ``a - b`` (-1, 0, 1), or None when the sizes decide it."""
    diff = sub(a, b)
    if diff is None:
        return None
    if isinstance(diff, int):
        return (diff > 0) - (diff < 0)
    numerator = diff.num if isinstance(diff, Frac) else diff  # (a fraction's denominator is > 0)
    if isinstance(numerator, int):
        return (numerator > 0) - (numerator < 0)
    at_least = symdim.sign(numerator)  # >= 0 or <= 0; strictly when it stays so one below (or above)
    if at_least == 1 and symdim.sign(symdim.add(numerator, -1)) == 1:
        return 1
    if at_least == -1 and symdim.sign(symdim.add(numerator, 1)) == -1:
        return -1
    return None


def compare(op: str, a: Number, b: Number) -> Element:
    """A comparison as 0 / 1 (None when the sizes decide it)."""
    if op == "Equal" and not isinstance(a, Frac) and not isinstance(b, Frac) and a == b:
        return 1
    sign = _difference_sign(a, b)
    if sign is None:
        return _different(a, b) if op == "Equal" else None
    return int({"Equal": sign == 0, "Less": sign < 0, "Greater": sign > 0, "LessOrEqual": sign <= 0,
                "GreaterOrEqual": sign >= 0}[op])


def _different(a: Number, b: Number) -> Element:
    """0 when a size (>= 0) is compared with a negative constant (exporters test dims against -1), else None; an
    expression that is not a sum of sizes is taken as one (an assumption)."""
    for x, y in ((a, b), (b, a)):
        if isinstance(x, int) and x < 0 and not isinstance(y, int) and not isinstance(y, Frac):
            return 0 if sum_of_dims(y) else assumed(0)
    return None


def extremum(op: str, a: Number, b: Number) -> Element:
    if not isinstance(a, Frac) and not isinstance(b, Frac):
        return symdim.dim_max(a, b) if op == "Max" else symdim.dim_min(a, b)
    sign = _difference_sign(a, b)
    if sign is None:
        return None
    return (a if sign >= 0 else b) if op == "Max" else (b if sign >= 0 else a)


def power(a: Number, b: Number) -> Element:
    if not isinstance(b, int) or not 0 <= b <= 8:
        return None
    result: Element = 1
    for _ in range(b):
        result = mul(result, a) if result is not None else None
    return result


def cast(a: Number, source: int, target: int) -> Element:
    """ONNX's Cast of one element (between integer and float types; others are not tracked)."""
    if is_int_type(target):
        if target == TensorProto.BOOL:
            return None if not isinstance(a, int) else int(a != 0)
        return trunc(a) if is_float_type(source) else a
    if is_float_type(target):
        if isinstance(a, int) and abs(a) > _FLOAT_EXACT[target]:
            return None
        return a if isinstance(a, int) or (isinstance(a, Frac) and isinstance(a.num, int)
                                           and isinstance(a.den, int)) else assumed(a)  # (a size taken as small)
    return None


# values as arrays ----------------------------------------------------------------------------------
def static_shape(shape: Sequence[Any] | None) -> tuple[int, ...] | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def to_array(value: Value, shape: Sequence[Any] | None) -> np.ndarray | None:
    """A tracked value as a numpy object array of its tensor's (static) shape."""
    dims = static_shape(shape)
    if dims is None:
        return None
    items = value if isinstance(value, list) else [value]
    if math.prod(dims) != len(items):
        return None
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(dims)


def from_array(array: np.ndarray) -> Value:
    """A value from an object array (None when it is too large to track)."""
    if array.size > MAX_VALUE_LENGTH:
        return None
    if array.ndim == 0:
        return array.item()  # type: ignore[no-any-return]
    return list(array.reshape(-1))


def known(value: Value) -> bool:
    """Whether every element of ``value`` is known."""
    if isinstance(value, list):
        return all(v is not None for v in value)
    return value is not None


def _guarded(fn: Callable[..., Element]) -> Callable[..., Element]:
    """An element function that gives None for an unknown operand or a computation past its bounds."""
    @functools.wraps(fn)
    def run(*args: Any) -> Element:
        if any(a is None for a in args):
            return None
        try:
            result = fn(*args)
        except (ZeroDivisionError, symdim.ExpressionTooLarge, TypeError, ValueError, OverflowError):
            return None
        if isinstance(result, int) and not INT64_RANGE[0] <= result <= INT64_RANGE[1]:
            return assumed(result)  # (ONNX wraps around)
        return result
    return run


def elementwise(fn: Callable[..., Element], arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """``fn`` over the broadcast elements of ``arrays`` (None when they do not broadcast or are too large)."""
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        return None
    if math.prod(shape) > MAX_VALUE_LENGTH:
        return None
    guarded = _guarded(fn)
    out = np.empty(shape, dtype=object)
    for index, items in zip(np.ndindex(*shape), zip(*(np.broadcast_to(a, shape).reshape(-1) for a in arrays),
                                                      strict=True), strict=True):
        out[index] = guarded(*items)
    return out


def reduce(fn: Callable[[Number, Number], Element], array: np.ndarray, axes: Sequence[int],
           keepdims: bool) -> np.ndarray:
    """``fn`` folded over ``axes`` of ``array``."""
    guarded = _guarded(fn)
    moved = np.moveaxis(array, list(axes), list(range(array.ndim - len(axes), array.ndim)))
    kept = moved.shape[:moved.ndim - len(axes)]
    flat = moved.reshape(*kept, -1) if kept else moved.reshape(1, -1)
    out = np.empty(flat.shape[:-1] if kept else (1,), dtype=object)
    for index in np.ndindex(*out.shape):
        row = flat[index]
        total: Element = row[0] if row.size else None
        for item in row[1:]:
            total = guarded(total, item)
        out[index] = total
    result = out.reshape(kept)
    if keepdims:
        for axis in sorted(axes):
            result = np.expand_dims(result, axis)
    return result


#: ONNX op -> its function on elements, for the ops shape arithmetic uses (the comparisons give 0/1)
BINARY: dict[str, Callable[[Number, Number], Element]] = {
    "Add": add, "Sub": sub, "Mul": mul, "Pow": power,
    "Max": functools.partial(extremum, "Max"), "Min": functools.partial(extremum, "Min"),
    "Sum": add, "Equal": functools.partial(compare, "Equal"), "Less": functools.partial(compare, "Less"),
    "Greater": functools.partial(compare, "Greater"), "LessOrEqual": functools.partial(compare, "LessOrEqual"),
    "GreaterOrEqual": functools.partial(compare, "GreaterOrEqual"),
}
UNARY: dict[str, Callable[[Number], Element]] = {
    "Identity": lambda a: a, "Neg": neg, "Floor": floor, "Ceil": ceil, "Round": round_half_even,
    "Abs": lambda a: abs(a) if isinstance(a, int) else (None if isinstance(a, Frac) else
                                                        a if sum_of_dims(a) else assumed(a)),
}


def _integer_only(fn: Callable[[int, int], int]) -> Callable[[Number, Number], Element]:
    def run(a: Number, b: Number) -> Element:
        return fn(a, b) if isinstance(a, int) and isinstance(b, int) else None
    return run


def _mod(a: Number, b: Number) -> Element:
    if isinstance(a, Frac) or isinstance(b, Frac) or b == 0:
        return None
    remainder = symdim.mod(a, b)
    # ONNX's integer Mod takes the divisor's sign, as Python's %: symdim's for a positive constant divisor
    return remainder if isinstance(b, int) and (isinstance(a, int) or b > 0) else assumed(remainder)


def _div(integer: bool) -> Callable[[Number, Number], Element]:
    def run(a: Number, b: Number) -> Element:
        if integer:
            return None if isinstance(a, Frac) or isinstance(b, Frac) else int_div(a, b)
        return None if b == 0 else true_div(a, b)
    return run


def binary_fn(op: str, dtype: int) -> Callable[[Number, Number], Element] | None:
    """The element function of a binary op on tensors of ``dtype`` (None: not tracked)."""
    if op == "Div":
        return _div(is_int_type(dtype))
    if op == "Mod":
        return _mod if is_int_type(dtype) else None
    if op in ("And", "Or", "Xor"):
        logic = {"And": lambda a, b: int(bool(a) and bool(b)), "Or": lambda a, b: int(bool(a) or bool(b)),
                 "Xor": lambda a, b: int(bool(a) != bool(b))}[op]
        return _integer_only(logic)
    return BINARY.get(op)


def float_element(value: float, dtype: int) -> Element:
    """A float constant's element: exact (an int, or a fraction that rounds back to the same float)."""
    if not math.isfinite(value):
        return None
    if float(value).is_integer():
        return int(value)
    approx = Fraction(value).limit_denominator(1 << 20)
    round_trip = np.float32 if dtype != TensorProto.DOUBLE else np.float64
    if round_trip(approx.numerator / approx.denominator) != round_trip(value):
        return None
    return Frac(approx.numerator, approx.denominator)


def constant_value(array: np.ndarray) -> Value:
    """The tracked value of a constant (at most :data:`MAX_VALUE_LENGTH` elements): integers exactly, floats as
    exact numbers where they are (``0.5`` is 1/2; ``0.1`` is 1/10 when it rounds back to the same float)."""
    if array.size > MAX_VALUE_LENGTH or array.dtype.kind not in "iubf":
        return None
    flat = array.reshape(-1)
    if array.dtype.kind == "f":
        dtype = TensorProto.DOUBLE if array.dtype == np.float64 else TensorProto.FLOAT
        items: list[Element] = [float_element(float(v), dtype) for v in flat]
    else:
        items = [int(v) for v in flat]
    return items[0] if array.ndim == 0 else items


def plain(value: Value) -> Any:
    """A value with its fractions as floats (for callers outside shape arithmetic)."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, Frac):
        try:
            return float(value)
        except TypeError:
            return None
    return value


def as_expr(value: Element) -> DimValue | None:
    """An element as a dim (an int or an expression; None for a fraction or unknown)."""
    return value if isinstance(value, (int, Expr)) else None
