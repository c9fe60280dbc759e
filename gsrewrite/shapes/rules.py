"""Symbolic shape rules of the standard ONNX ops: output shapes (and the values of small tensors, the shape
arithmetic exporters emit, :mod:`gsrewrite.shapes.values`) from the inputs', with dims as
:mod:`gsrewrite.shapes.symdim` expressions.

A rule gets a :class:`NodeView` and returns one :class:`Info` per output, ``None`` where it cannot tell; the
engine (:mod:`gsrewrite.shapes.walk`) falls back to ONNX's own inference there. Rules never raise
on odd input: a shape they do not understand is "unknown", not an error.

A rule that takes a dim or an element to hold where it holds only for some sizes (a small Slice bound inside a
symbolic dim, a symbolic count taken as >= 0, a truncation taken as a floor) passes it through
:func:`gsrewrite.shapes.values.assumed`: the walk marks that output not exact (:attr:`Info.exact`), and under
:func:`gsrewrite.shapes.values.proving` the dim or element is unknown instead. Everything else a rule computes
holds for every size of the symbols, on a model that runs (broadcasting dims that agree, a Reshape whose ``-1``
divides).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import TensorProto

from gsrewrite.shapes import values
from gsrewrite.shapes.symdim import DimValue, Expr, ceil_div, dim_max, dim_min, floor_div, mul
from gsrewrite.shapes.symdim import add as dim_add
from gsrewrite.shapes.symdim import sub as dim_sub
from gsrewrite.shapes.values import MAX_VALUE_LENGTH, Element, Frac, Value, constant_value

__all__ = ["MAX_VALUE_LENGTH", "RULES", "Dim", "Info", "NodeView", "Shape", "Value", "constant_value"]

Dim = DimValue | None
Shape = list[Dim]

#: Slice ends at or beyond this mean "to the end"
_TO_THE_END = 2**30


@dataclass(slots=True)
class Info:
    """What is known of one tensor: ONNX element type (0 = unknown), shape (None = unknown rank), value."""

    dtype: int = 0
    shape: Shape | None = None
    value: Value = None
    has_value: bool = False
    #: the elements of a small float constant as they are stored (Resize scales)
    floats: list[float] | None = None
    #: the shape and value hold for every size of the symbols: no rule assumed anything to find them, here or in
    #: the tensors they come from (see :func:`gsrewrite.shapes.values.assumed`)
    exact: bool = True

    @staticmethod
    def of_value(dtype: int, value: Value) -> Info:
        shape: Shape = [len(value)] if isinstance(value, list) else []
        return Info(dtype, shape, value, True)

    @staticmethod
    def of_array(dtype: int, array: np.ndarray | None, shape: Shape | None = None) -> Info:
        """A tensor of ``shape`` (the array's by default) with the array's elements as its value."""
        if array is not None and not isinstance(array, np.ndarray):  # (numpy gives a 0-d result as the item)
            item = array
            array = np.empty((), dtype=object)
            array[()] = item
        out = Info(dtype, list(array.shape) if shape is None and array is not None else shape)
        if array is not None:
            tracked = values.from_array(array)
            if tracked is not None or array.ndim == 0:
                out.value, out.has_value = tracked, True
        return out


@dataclass(slots=True)
class NodeView:
    op: str
    inputs: list[Info | None]
    attrs: dict[str, Any]
    opset: int
    n_outputs: int
    fresh: Callable[[str], Expr] = field(default=lambda hint: Expr({}))

    def shape(self, i: int) -> Shape | None:
        info = self.inputs[i] if i < len(self.inputs) else None
        return None if info is None or info.shape is None else list(info.shape)

    def dtype(self, i: int) -> int:
        info = self.inputs[i] if i < len(self.inputs) else None
        return 0 if info is None else info.dtype

    def value(self, i: int) -> Value:
        info = self.inputs[i] if i < len(self.inputs) else None
        return None if info is None or not info.has_value else info.value

    def array(self, i: int) -> np.ndarray | None:
        """Input ``i``'s value as an object array of its shape (None when it is not tracked)."""
        info = self.inputs[i] if i < len(self.inputs) else None
        if info is None or not info.has_value:
            return None
        return values.to_array(info.value, info.shape)

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def ints(self, i: int) -> list[int] | None:
        """A 1-D (or scalar) input's value when every element is a static int."""
        value = self.value(i)
        items = value if isinstance(value, list) else [value]
        if value is None or not all(isinstance(x, int) for x in items):
            return None
        return [int(x) for x in items]  # type: ignore[arg-type]

    def floats(self, i: int) -> list[float] | None:
        info = self.inputs[i] if i < len(self.inputs) else None
        return None if info is None else info.floats

    def dims(self, i: int) -> list[Dim] | None:
        """A 1-D (or scalar) input's value as dims (a fraction is not a dim: None)."""
        value = self.value(i)
        if value is None:
            return None
        items = list(value) if isinstance(value, list) else [value]
        return [values.as_expr(v) for v in items]


Rule = Callable[[NodeView], list[Info | None]]
RULES: dict[str, Rule] = {}


def rule(*ops: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn
    return register


# helpers -------------------------------------------------------------------------------------------
def known(dims: Sequence[Dim] | None) -> bool:
    return dims is not None and all(d is not None for d in dims)


def product(dims: Sequence[Dim]) -> Dim:
    total: DimValue = 1
    for d in dims:
        if d is None:
            return None
        total = mul(total, d)
    return total


def broadcast(*shapes: Shape | None) -> Shape | None:
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes if s is not None), default=0)
    out: Shape = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if s is not None and len(s) - rank + axis >= 0]
        out.append(_broadcast_dim(dims))
    return out


def _broadcast_dim(dims: list[Dim]) -> Dim:
    not_one = [d for d in dims if d != 1]
    if not not_one:
        return 1
    if any(d is None for d in not_one):
        known_dims = [d for d in not_one if d is not None]
        return known_dims[0] if known_dims and isinstance(known_dims[0], int) else None
    static = [d for d in not_one if isinstance(d, int)]
    if static:
        return static[0]
    unique: list[DimValue] = []
    for d in not_one:
        if d is not None and d not in unique:
            unique.append(d)
    return unique[0] if len(unique) == 1 else dim_max(*unique)


def _axis(axis: int, rank: int) -> int | None:
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None


def _same(view: NodeView, dtype: int | None = None) -> list[Info | None]:
    shape = view.shape(0)
    out = Info(view.dtype(0) if dtype is None else dtype, shape)
    return [out] + [None] * (view.n_outputs - 1)


def _reshaped(view: NodeView, out: Info, source: int = 0) -> Info:
    """``out`` with input ``source``'s value, its elements in the same order (a view op: Reshape, Squeeze, ...)."""
    array = view.array(source)
    if array is not None and out.shape is not None:
        target = values.static_shape(out.shape)
        if target is not None and math.prod(target) == array.size:
            out.value, out.has_value = values.from_array(array.reshape(target)), True
    return out


def _is_int_type(dtype: int) -> bool:
    return values.is_int_type(dtype)


# elementwise -------------------------------------------------------------------------------------
_UNARY = ("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Neg", "Softmax",
          "LogSoftmax", "Hardmax", "Identity", "LeakyRelu", "Clip", "Softplus", "Softsign", "HardSigmoid",
          "HardSwish", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Floor", "Ceil", "Round",
          "Sign", "Selu", "Elu", "Celu", "Mish", "Gelu", "Trilu", "CumSum", "InstanceNormalization",
          "LpNormalization", "LRN", "GroupNormalization", "MeanVarianceNormalization", "Shrink",
          "ThresholdedRelu", "Not", "BitwiseNot", "Swish", "ReverseSequence", "Bernoulli", "Asinh", "Acosh",
          "Atanh", "CumProd", "RotaryEmbedding")


@rule(*_UNARY)
def _unary(view: NodeView) -> list[Info | None]:
    out = _same(view)
    fn = values.UNARY.get(view.op)
    if view.op == "Not":
        fn = lambda a: (1 - a) if a in (0, 1) else None  # noqa: E731
    array = view.array(0)
    if fn is not None and array is not None and out[0] is not None:
        result = values.elementwise(fn, [array])
        if result is not None:
            out[0].value, out[0].has_value = values.from_array(result), True
    return out


@rule("IsNaN", "IsInf")
def _predicate(view: NodeView) -> list[Info | None]:
    return _same(view, TensorProto.BOOL)


def _cast_value(view: NodeView, out: Info, source: int, target: int) -> Info:
    array = view.array(0)
    if array is not None:
        result = values.elementwise(lambda a: values.cast(a, source, target), [array])
        if result is not None:
            out.value, out.has_value = values.from_array(result), True
    return out


@rule("Cast")
def _cast(view: NodeView) -> list[Info | None]:
    to = int(view.attrs.get("to", 0))
    return [_cast_value(view, Info(to, view.shape(0)), view.dtype(0), to)]


@rule("CastLike")
def _cast_like(view: NodeView) -> list[Info | None]:
    return [_cast_value(view, Info(view.dtype(1), view.shape(0)), view.dtype(0), view.dtype(1))]


_ARITH = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "BitShift",
          "BitwiseAnd", "BitwiseOr", "BitwiseXor")
_COMPARE = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")


@rule(*_ARITH, *_COMPARE)
def _binary(view: NodeView) -> list[Info | None]:
    present = [i for i in range(len(view.inputs)) if view.has_input(i)]
    shapes = [view.shape(i) for i in present]
    dtype = TensorProto.BOOL if view.op in _COMPARE else view.dtype(0)
    out = Info(dtype, broadcast(*shapes))
    fn = values.binary_fn(view.op, view.dtype(0))
    if fn is None or not present or (len(present) != 2 and view.op not in ("Max", "Min", "Sum")):
        return [out]
    arrays = [view.array(i) for i in present]
    if any(a is None for a in arrays):
        return [out]
    result = arrays[0]
    for other in arrays[1:]:
        result = values.elementwise(fn, [result, other])  # type: ignore[list-item]
        if result is None:
            return [out]
    if len(arrays) == 1:
        result = values.elementwise(lambda a: a, [result])  # type: ignore[list-item]
    if result is not None:
        out.value, out.has_value = values.from_array(result), True
    return [out]


@rule("Where")
def _where(view: NodeView) -> list[Info | None]:
    out = Info(view.dtype(1) or view.dtype(2), broadcast(view.shape(0), view.shape(1), view.shape(2)))
    arrays = [view.array(i) for i in range(3)]
    if all(a is not None for a in arrays):
        result = values.elementwise(lambda c, a, b: None if c not in (0, 1) else (a if c else b),
                                    arrays)  # type: ignore[arg-type]
        if result is not None:
            out.value, out.has_value = values.from_array(result), True
    return [out]


# linear algebra ---------------------------------------------------------------------------------
@rule("MatMul", "MatMulInteger", "QLinearMatMul")
def _matmul(view: NodeView) -> list[Info | None]:
    a_index, b_index = (0, 3) if view.op == "QLinearMatMul" else (0, 1)
    a, b = view.shape(a_index), view.shape(b_index)
    dtype = {"MatMulInteger": TensorProto.INT32}.get(view.op, view.dtype(a_index))
    if view.op == "QLinearMatMul":
        dtype = view.dtype(7)
    if a is None or b is None or not a or not b:
        return [None]
    rows = a[-2:-1] if len(a) > 1 else []
    cols = b[-1:] if len(b) > 1 else []
    batch = broadcast(a[:-2], b[:-2]) or []
    return [Info(dtype, [*batch, *rows, *cols])]


@rule("Gemm")
def _gemm(view: NodeView) -> list[Info | None]:
    a, b = view.shape(0), view.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [None]
    m = a[1] if view.attrs.get("transA", 0) else a[0]
    n = b[0] if view.attrs.get("transB", 0) else b[1]
    return [Info(view.dtype(0), [m, n])]


@rule("Einsum")
def _einsum(view: NodeView) -> list[Info | None]:
    equation = str(view.attrs.get("equation", "")).replace(" ", "")
    if "->" not in equation or "..." in equation:
        return [None]
    lhs, rhs = equation.split("->")
    letters: dict[str, Dim] = {}
    for i, term in enumerate(lhs.split(",")):
        shape = view.shape(i)
        if shape is None or len(shape) != len(term):
            return [None]
        for letter, dim in zip(term, shape, strict=True):
            if letters.get(letter) in (None, 1):
                letters[letter] = dim
    return [Info(view.dtype(0), [letters.get(c) for c in rhs])]


# convolution and pooling ----------------------------------------------------------------------------
def _spatial(view: NodeView, x: Shape, kernel: Sequence[Dim], *, ceil_mode: bool = False) -> Shape:
    rank = len(kernel)
    spatial = x[2:]
    strides = list(view.attrs.get("strides", [1] * rank))
    dilations = list(view.attrs.get("dilations", [1] * rank))
    auto_pad = view.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    out: Shape = []
    for i in range(rank):
        size, k = spatial[i], kernel[i]
        if size is None or k is None:
            out.append(None)
            continue
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(ceil_div(size, strides[i]))
            continue
        pads = [0] * (2 * rank) if auto_pad == "VALID" else list(view.attrs.get("pads", [0] * (2 * rank)))
        span = dim_add(dim_sub(dim_add(size, pads[i] + pads[i + rank]), mul(dilations[i], dim_sub(k, 1))), -1)
        if not ceil_mode:
            out.append(dim_add(floor_div(span, strides[i]), 1))
            continue
        # ceil mode drops a last window that would start in the end padding: the last start (out - 1) * stride
        # must be < size + pad_begin
        ceiled = dim_add(ceil_div(span, strides[i]), 1)
        limit = dim_add(floor_div(dim_add(size, pads[i] - 1), strides[i]), 1)
        out.append(dim_min(ceiled, limit))
    return out


@rule("Conv", "ConvInteger", "QLinearConv")
def _conv(view: NodeView) -> list[Info | None]:
    x_index, w_index = (0, 3) if view.op == "QLinearConv" else (0, 1)
    x, w = view.shape(x_index), view.shape(w_index)
    if x is None or len(x) < 3:
        return [None]
    kernel = list(view.attrs.get("kernel_shape", [])) or (w[2:] if w else None)
    if kernel is None or len(kernel) != len(x) - 2:
        return [None]
    channels = w[0] if w else None
    dtype = view.dtype(7) if view.op == "QLinearConv" else (
        TensorProto.INT32 if view.op == "ConvInteger" else view.dtype(0))
    return [Info(dtype, [x[0], channels, *_spatial(view, x, kernel)])]


@rule("ConvTranspose")
def _conv_transpose(view: NodeView) -> list[Info | None]:
    x, w = view.shape(0), view.shape(1)
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return [None]
    rank = len(x) - 2
    group = int(view.attrs.get("group", 1))
    channels = mul(w[1], group) if w[1] is not None else None
    output_shape = view.attrs.get("output_shape")
    if output_shape:
        return [Info(view.dtype(0), [x[0], channels, *[int(d) for d in output_shape][-rank:]])]
    kernel = list(view.attrs.get("kernel_shape", [])) or w[2:]
    strides = list(view.attrs.get("strides", [1] * rank))
    dilations = list(view.attrs.get("dilations", [1] * rank))
    pads = list(view.attrs.get("pads", [0] * (2 * rank)))
    output_padding = list(view.attrs.get("output_padding", [0] * rank))
    spatial: Shape = []
    for i in range(rank):
        size, k = x[2 + i], kernel[i]
        if size is None or k is None:
            spatial.append(None)
            continue
        value = dim_add(mul(strides[i], dim_sub(size, 1)), output_padding[i])
        value = dim_add(value, dim_add(mul(dilations[i], dim_sub(k, 1)), 1))
        spatial.append(dim_sub(value, pads[i] + pads[i + rank]))
    return [Info(view.dtype(0), [x[0], channels, *spatial])]


@rule("MaxPool", "AveragePool", "LpPool")
def _pool(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    kernel = list(view.attrs.get("kernel_shape", []))
    if x is None or len(x) < 3 or len(kernel) != len(x) - 2:
        return [None] * view.n_outputs
    shape = [x[0], x[1], *_spatial(view, x, kernel, ceil_mode=bool(view.attrs.get("ceil_mode", 0)))]
    out: list[Info | None] = [Info(view.dtype(0), shape)]
    if view.n_outputs > 1:
        out.append(Info(TensorProto.INT64, list(shape)))
    return out


@rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None or len(x) < 2:
        return [None]
    return [Info(view.dtype(0), [x[0], x[1], *[1] * (len(x) - 2)])]


@rule("BatchNormalization")
def _batch_norm(view: NodeView) -> list[Info | None]:
    return _same(view)


@rule("LayerNormalization", "RMSNormalization")
def _layer_norm(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    out: list[Info | None] = [Info(view.dtype(0), x)]
    if x is not None:
        axis = _axis(int(view.attrs.get("axis", -1)), len(x))
        stats = None if axis is None else [*x[:axis], *[1] * (len(x) - axis)]
        out += [Info(TensorProto.FLOAT, stats) for _ in range(view.n_outputs - 1)]
    return out + [None] * (view.n_outputs - len(out))


@rule("Dropout")
def _dropout(view: NodeView) -> list[Info | None]:
    shape = view.shape(0)
    out: list[Info | None] = [Info(view.dtype(0), shape), Info(TensorProto.BOOL, shape)]
    return out[:view.n_outputs]


# shape manipulation -------------------------------------------------------------------------------
@rule("Shape")
def _shape(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    rank = len(x)
    start = int(view.attrs.get("start", 0))
    end = int(view.attrs.get("end", rank))
    start, end = (max(0, min(rank, s + rank if s < 0 else s)) for s in (start, end))
    return [Info.of_value(TensorProto.INT64, list(x[start:end]))]


@rule("Size")
def _size(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    out = Info(TensorProto.INT64, [])
    if x is not None:
        out.value, out.has_value = product(x), True
    return [out]


@rule("Reshape")
def _reshape(view: NodeView) -> list[Info | None]:
    x, target = view.shape(0), view.dims(1)
    if target is None:
        target_shape = view.shape(1)
        if target_shape is None or len(target_shape) != 1 or not isinstance(target_shape[0], int):
            return [None]
        return [Info(view.dtype(0), [None] * target_shape[0])]
    allow_zero = bool(view.attrs.get("allowzero", 0))
    out: Shape = []
    for i, d in enumerate(target):
        if d == 0 and not allow_zero:
            out.append(x[i] if x is not None and i < len(x) else None)
        else:
            out.append(d)
    if -1 in out:
        rest = [d for d in out if d != -1]
        total = product(x) if x is not None else None
        known_rest = product(rest)
        index = out.index(-1)
        out[index] = floor_div(total, known_rest) if total is not None and known_rest not in (None, 0) else None
    return [_reshaped(view, Info(view.dtype(0), out))]


@rule("Flatten")
def _flatten(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    axis = int(view.attrs.get("axis", 1))
    axis = axis + len(x) if axis < 0 else axis
    return [_reshaped(view, Info(view.dtype(0), [product(x[:axis]), product(x[axis:])]))]


@rule("Transpose")
def _transpose(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    perm = list(view.attrs.get("perm", range(len(x) - 1, -1, -1)))
    if sorted(perm) != list(range(len(x))):
        return [None]
    array = view.array(0)
    return [Info.of_array(view.dtype(0), None if array is None else array.transpose(perm), [x[p] for p in perm])]


def _axes(view: NodeView, input_index: int) -> list[int] | None:
    """Axes from the attribute (older opsets) or the input (newer)."""
    if "axes" in view.attrs:
        return [int(a) for a in view.attrs["axes"]]
    if view.has_input(input_index):
        return view.ints(input_index)
    return []


@rule("Squeeze")
def _squeeze(view: NodeView) -> list[Info | None]:
    x, axes = view.shape(0), _axes(view, 1)
    if x is None or axes is None:
        return [None]
    if not axes:
        if not all(isinstance(d, int) for d in x):
            return [None]
        kept = [d for d in x if d != 1]
    else:
        drop = {_axis(a, len(x)) for a in axes}
        kept = [d for i, d in enumerate(x) if i not in drop]
    return [_reshaped(view, Info(view.dtype(0), kept))]


@rule("Unsqueeze")
def _unsqueeze(view: NodeView) -> list[Info | None]:
    x, axes = view.shape(0), _axes(view, 1)
    if x is None or axes is None:
        return [None]
    rank = len(x) + len(axes)
    positions = sorted(a + rank if a < 0 else a for a in axes)
    shape: Shape = list(x)
    for p in positions:
        shape.insert(p, 1)
    return [_reshaped(view, Info(view.dtype(0), shape))]


@rule("Concat")
def _concat(view: NodeView) -> list[Info | None]:
    shapes = [view.shape(i) for i in range(len(view.inputs))]
    if any(s is None for s in shapes) or not shapes:
        return [None]
    rank = len(shapes[0])  # type: ignore[arg-type]
    axis = _axis(int(view.attrs.get("axis", 0)), rank)
    if axis is None or any(len(s) != rank for s in shapes):  # type: ignore[arg-type]
        return [None]
    out_shape: Shape = []
    for i in range(rank):
        dims = [s[i] for s in shapes]  # type: ignore[index]
        out_shape.append(_sum(dims) if i == axis else next((d for d in dims if d is not None), None))
    arrays = [view.array(i) for i in range(len(view.inputs))]
    if any(a is None for a in arrays):
        return [Info(view.dtype(0), out_shape)]
    try:
        joined: np.ndarray = np.concatenate(arrays, axis=axis)  # type: ignore[arg-type]
    except ValueError:  # (shapes that do not concatenate: the model fails there)
        return [Info(view.dtype(0), out_shape)]
    return [Info.of_array(view.dtype(0), joined, out_shape)]


def _sum(dims: Sequence[Dim]) -> Dim:
    total: DimValue = 0
    for d in dims:
        if d is None:
            return None
        total = dim_add(total, d)
    return total


@rule("Split")
def _split(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None] * view.n_outputs
    axis = _axis(int(view.attrs.get("axis", 0)), len(x))
    if axis is None:
        return [None] * view.n_outputs
    sizes: list[Dim] | None
    if "split" in view.attrs:
        sizes = [int(s) for s in view.attrs["split"]]
    elif view.has_input(1):
        sizes = view.dims(1)
    else:
        dim = x[axis]
        n = int(view.attrs.get("num_outputs", view.n_outputs))
        if dim is None:
            sizes = None
        elif view.opset >= 18 and "num_outputs" in view.attrs:
            chunk = ceil_div(dim, n)
            chunks: list[Dim] = [chunk] * (n - 1)
            chunks.append(dim_sub(dim, mul(chunk, n - 1)))
            sizes = chunks
        else:
            sizes = [floor_div(dim, n)] * n
    if sizes is None or len(sizes) != view.n_outputs:
        return [None] * view.n_outputs
    outs: list[Info | None] = [Info(view.dtype(0), [*x[:axis], size, *x[axis + 1:]]) for size in sizes]
    array = view.array(0)
    counts = [size for size in sizes if isinstance(size, int)]
    if array is not None and len(counts) == len(sizes) and sum(counts) == array.shape[axis]:
        offsets = np.cumsum([0, *counts])
        for out, begin, end in zip(outs, offsets[:-1], offsets[1:], strict=True):
            assert out is not None
            picked = np.take(array, range(int(begin), int(end)), axis=axis)
            out.value, out.has_value = values.from_array(picked), True
    return outs


#: a constant Slice bound of at most this magnitude is taken to lie inside a symbolic dim (``x[1:-1]`` is
#: ``dim - 2``, not ``max(0, min(dim, ...))``); larger ones are clamped explicitly
_SMALL_BOUND = 64


def _clamp_index(value: Dim, dim: DimValue, low: int, high: DimValue) -> Dim:
    """ONNX Slice's clamping of a start/end: negative counts from the end, then into [low, high]."""
    if value is None or not isinstance(value, int):
        return value
    if value >= _TO_THE_END:
        return high
    if value <= -_TO_THE_END:
        return low
    resolved = dim_add(dim, value) if value < 0 else value
    if abs(value) <= _SMALL_BOUND:
        return resolved if isinstance(dim, int) else values.assumed(resolved)  # (taken to lie inside the dim)
    return dim_max(dim_min(resolved, high), low)


def _slice_length(dim: Dim, start: Dim, end: Dim, step: int) -> Dim:
    if dim is None or start is None or end is None:
        return None
    if isinstance(dim, int) and isinstance(start, int) and isinstance(end, int):
        return len(range(*slice(start, end, step).indices(dim)))
    if step > 0:
        begin, stop = _clamp_index(start, dim, 0, dim), _clamp_index(end, dim, 0, dim)
        if begin is None or stop is None:
            return None
        length = ceil_div(dim_sub(stop, begin), step)
    else:
        last = dim_sub(dim, 1)
        begin, stop = _clamp_index(start, dim, -1, last), _clamp_index(end, dim, -1, last)
        if begin is None or stop is None:
            return None
        length = ceil_div(dim_sub(begin, stop), -step)
    if isinstance(length, int):
        return max(length, 0)
    return length if values.sum_of_dims(length) else values.assumed(length)  # (a symbolic length taken as >= 0)


@rule("Slice")
def _slice(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    if view.opset < 10:
        starts = list(view.attrs.get("starts", []))
        ends = list(view.attrs.get("ends", []))
        axes = list(view.attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts_v, ends_v = view.dims(1), view.dims(2)
        axes_v = view.ints(3) if view.has_input(3) else None
        steps_v = view.ints(4) if view.has_input(4) else None
        if starts_v is None or ends_v is None or (view.has_input(3) and axes_v is None) or \
                (view.has_input(4) and steps_v is None):
            return [Info(view.dtype(0), [None] * len(x))]
        starts, ends = starts_v, ends_v
        axes = axes_v if axes_v is not None else list(range(len(starts)))
        steps = steps_v if steps_v is not None else [1] * len(starts)
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        return [None]
    shape: Shape = list(x)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        a = _axis(int(axis), len(x))
        if a is None or step == 0:
            return [None]
        shape[a] = _slice_length(x[a], start, end, int(step))
    out = Info(view.dtype(0), shape)
    array = view.array(0)
    if array is not None and all(isinstance(v, int) for v in (*starts, *ends)):
        index: list[slice] = [slice(None)] * array.ndim
        for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
            index[_axis(int(axis), array.ndim)] = slice(int(start), int(end), int(step))  # type: ignore[arg-type, index]
        out = Info.of_array(view.dtype(0), array[tuple(index)], shape)
    return [out]


@rule("Gather")
def _gather(view: NodeView) -> list[Info | None]:
    data, indices = view.shape(0), view.shape(1)
    if data is None or indices is None:
        return [None]
    axis = _axis(int(view.attrs.get("axis", 0)), len(data))
    if axis is None:
        return [None]
    shape = [*data[:axis], *indices, *data[axis + 1:]]
    array, picks = view.array(0), view.array(1)
    if array is None or picks is None or not all(isinstance(p, int) for p in picks.reshape(-1)):
        return [Info(view.dtype(0), shape)]
    size = array.shape[axis]
    if not all(-size <= p < size for p in picks.reshape(-1)):
        return [Info(view.dtype(0), shape)]  # (out of range: the model fails there)
    return [Info.of_array(view.dtype(0), np.take(array, picks.astype(np.int64), axis=axis), shape)]


@rule("GatherND")
def _gather_nd(view: NodeView) -> list[Info | None]:
    """indices[..., :k] pick slices of data after its ``batch_dims`` leading dims: the output is
    indices.shape[:-1] + data.shape[batch_dims + k:] (k = the last dim of indices, which must be static)."""
    data, indices = view.shape(0), view.shape(1)
    if data is None or indices is None or not indices:
        return [None]
    depth, batch = indices[-1], int(view.attrs.get("batch_dims", 0))
    if not isinstance(depth, int) or batch < 0 or batch + depth > len(data) or batch >= len(indices):
        return [None]
    return [Info(view.dtype(0), [*indices[:-1], *data[batch + depth:]])]


@rule("GatherElements")
def _gather_elements(view: NodeView) -> list[Info | None]:
    return [Info(view.dtype(0), view.shape(1))]


@rule("ScatterND", "ScatterElements", "Scatter")
def _scatter(view: NodeView) -> list[Info | None]:
    return _same(view)


@rule("Expand")
def _expand(view: NodeView) -> list[Info | None]:
    target = view.dims(1)
    if target is None:
        return [None]
    shape = broadcast(view.shape(0), target)
    array, size = view.array(0), values.static_shape(shape)
    if array is None or size is None or math.prod(size) > MAX_VALUE_LENGTH:
        return [Info(view.dtype(0), shape)]
    try:
        return [Info.of_array(view.dtype(0), np.broadcast_to(array, size), shape)]
    except ValueError:  # (shapes that do not broadcast: the model fails there)
        return [Info(view.dtype(0), shape)]


@rule("Tile")
def _tile(view: NodeView) -> list[Info | None]:
    x, repeats = view.shape(0), view.dims(1)
    if x is None or repeats is None or len(repeats) != len(x):
        return [None]
    shape = [None if d is None or r is None else mul(d, r) for d, r in zip(x, repeats, strict=True)]
    array, counts = view.array(0), view.ints(1)
    if array is None or counts is None or math.prod(array.shape) * math.prod(counts) > MAX_VALUE_LENGTH:
        return [Info(view.dtype(0), shape)]
    return [Info.of_array(view.dtype(0), np.tile(array, counts), shape)]


@rule("ConstantOfShape")
def _constant_of_shape(view: NodeView) -> list[Info | None]:
    target = view.dims(0)
    value = view.attrs.get("value")
    dtype = int(value.data_type) if value is not None and hasattr(value, "data_type") else TensorProto.FLOAT
    if target is None:
        return [None]
    size = values.static_shape(target)
    if size is None or math.prod(size) > MAX_VALUE_LENGTH:
        return [Info(dtype, list(target))]
    from onnx import numpy_helper

    fill = values.constant_value(numpy_helper.to_array(value).reshape(-1)[:1]) if value is not None else [0]
    array = np.empty(size, dtype=object)
    array.fill(fill[0] if isinstance(fill, list) and fill else None)
    return [Info.of_array(dtype, array, list(target))]


@rule("Range")
def _range(view: NodeView) -> list[Info | None]:
    start, limit, delta = (_scalar(view, i) for i in range(3))
    if start is None or limit is None or delta is None or delta == 0:
        return [Info(view.dtype(0), [None])]
    # max(ceil((limit - start) / delta), 0): the count of a size is >= 0 (a symbolic count is taken as it is)
    span = values.sub(limit, start)
    steps = None if span is None else values.true_div(span, delta)
    length = None if steps is None or isinstance(delta, Expr) else values.ceil(steps)
    if isinstance(length, int):
        length = max(length, 0)
    elif isinstance(length, Expr) and not values.sum_of_dims(length):
        length = values.assumed(length)  # (a symbolic count taken as >= 0)
    if not isinstance(length, (int, Expr)):
        return [Info(view.dtype(0), [None])]
    out = Info(view.dtype(0), [length])
    if isinstance(length, int) and length <= MAX_VALUE_LENGTH:
        items: list[Element] = []
        for i in range(length):
            step = values.mul(delta, i)
            items.append(None if step is None else values.add(start, step))
        out.value, out.has_value = items, True
    return [out]


def _scalar(view: NodeView, i: int) -> Element:
    """A scalar (or one-element) input's element."""
    value = view.value(i)
    if isinstance(value, list):
        return value[0] if len(value) == 1 else None
    return value


_REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@rule(*_REDUCE)
def _reduce(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    axes = _axes(view, 1)
    if axes is None:
        return [Info(view.dtype(0), None)]
    keep = bool(view.attrs.get("keepdims", 1))
    if not axes:
        if view.attrs.get("noop_with_empty_axes", 0):
            return [Info(view.dtype(0), list(x))]
        axes = list(range(len(x)))
    chosen = {_axis(a, len(x)) for a in axes}
    shape = [1 if i in chosen else d for i, d in enumerate(x)] if keep else \
        [d for i, d in enumerate(x) if i not in chosen]
    fn = _REDUCE_VALUES.get(view.op)
    array = view.array(0)
    reduced = [a for a in chosen if a is not None]
    if fn is None or array is None or len(reduced) != len(chosen):
        return [Info(view.dtype(0), shape)]
    return [Info.of_array(view.dtype(0), values.reduce(fn, array, sorted(reduced), keep), shape)]


_REDUCE_VALUES = {"ReduceProd": values.mul, "ReduceSum": values.add, "ReduceMax": values.BINARY["Max"],
                  "ReduceMin": values.BINARY["Min"]}


@rule("ArgMax", "ArgMin")
def _argmax(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    axis = _axis(int(view.attrs.get("axis", 0)), len(x))
    keep = bool(view.attrs.get("keepdims", 1))
    shape = [1 if i == axis else d for i, d in enumerate(x)] if keep else [d for i, d in enumerate(x)
                                                                         if i != axis]
    return [Info(TensorProto.INT64, shape)]


@rule("TopK")
def _topk(view: NodeView) -> list[Info | None]:
    x, k = view.shape(0), view.dims(1)
    if x is None:
        return [None, None]
    axis = _axis(int(view.attrs.get("axis", -1)), len(x))
    size = k[0] if k else None
    shape = [size if i == axis else d for i, d in enumerate(x)]
    return [Info(view.dtype(0), shape), Info(TensorProto.INT64, list(shape))]


@rule("Pad")
def _pad(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    pads = list(view.attrs["pads"]) if "pads" in view.attrs else view.dims(1)
    axes = view.ints(3) if view.has_input(3) else list(range(len(x)))
    if pads is None or axes is None or len(pads) != 2 * len(axes):
        return [Info(view.dtype(0), [None] * len(x))]
    shape: Shape = list(x)
    for i, axis in enumerate(axes):
        a = _axis(axis, len(x))
        if a is None:
            return [None]
        before, after = pads[i], pads[i + len(axes)]
        shape[a] = None if shape[a] is None or before is None or after is None else \
            dim_add(dim_add(shape[a], before), after)  # type: ignore[arg-type]
    return [Info(view.dtype(0), shape)]


@rule("Resize", "Upsample")
def _resize(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    axes = [_axis(int(a), len(x)) for a in view.attrs.get("axes", range(len(x)))]
    if None in axes:
        return [None]
    unknown = Info(view.dtype(0), [None] * len(x))
    sizes = view.dims(3) if view.op == "Resize" and view.has_input(3) else None
    if sizes is not None:
        policy = str(view.attrs.get("keep_aspect_ratio_policy", "stretch"))
        if len(sizes) != len(axes) or policy != "stretch":
            return [unknown]
        shape: Shape = list(x)
        for axis, size in zip(axes, sizes, strict=True):
            shape[axis] = size  # type: ignore[index]
        return [Info(view.dtype(0), shape)]
    scale_input = (1 if view.opset < 11 else 2) if view.op == "Resize" else 1
    scales: list[Any] | None = view.attrs.get("scales") if "scales" in view.attrs else \
        (view.floats(scale_input) or _elements(view.value(scale_input)))
    if scales is None or len(scales) != len(axes):
        return [unknown]
    shape = list(x)
    for axis, scale in zip(axes, scales, strict=True):
        shape[axis] = _scaled(x[axis], scale)  # type: ignore[index]
    return [Info(view.dtype(0), shape)]


def _elements(value: Value) -> list[Element] | None:
    return None if value is None else (value if isinstance(value, list) else [value])


def _scaled(dim: Dim, scale: Any) -> Dim:
    """A Resize output dim: ``dim * scale`` truncated, in float32 as onnxruntime computes it when both are
    numbers; exactly (a floor) when either is symbolic (``h * (2h / h)`` is ``2h``)."""
    if dim is None or scale is None:
        return None
    concrete = isinstance(scale, (int, float)) or (isinstance(scale, Frac) and isinstance(scale.num, int)
                                                    and isinstance(scale.den, int))
    if isinstance(dim, int) and concrete:
        return int(np.float32(float(scale)) * np.float32(dim))
    if isinstance(scale, float):
        if not scale.is_integer():
            return None
        scale = int(scale)
    scaled = values.mul(dim, scale)
    result = None if scaled is None else values.floor(scaled)  # (onnxruntime's float32 product taken as exact)
    return values.assumed(result) if isinstance(result, (int, Expr)) else None


@rule("DepthToSpace", "SpaceToDepth")
def _depth_space(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    b = int(view.attrs.get("blocksize", 1))
    if x is None or len(x) != 4 or any(d is None for d in x):
        return [None]
    n, c, h, w = x
    assert c is not None and h is not None and w is not None
    if view.op == "DepthToSpace":
        return [Info(view.dtype(0), [n, floor_div(c, b * b), mul(h, b), mul(w, b)])]
    return [Info(view.dtype(0), [n, mul(c, b * b), floor_div(h, b), floor_div(w, b)])]


@rule("NonZero")
def _nonzero(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    return [Info(TensorProto.INT64, None if x is None else [len(x), view.fresh("nonzero")])]


@rule("OneHot")
def _one_hot(view: NodeView) -> list[Info | None]:
    indices, depth = view.shape(0), view.dims(1)
    if indices is None:
        return [None]
    axis = int(view.attrs.get("axis", -1))
    rank = len(indices) + 1
    axis = axis + rank if axis < 0 else axis
    shape: Shape = list(indices)
    shape.insert(axis, depth[0] if depth else None)
    return [Info(view.dtype(2), shape)]


# recurrent ------------------------------------------------------------------------------------------
@rule("LSTM", "GRU", "RNN")
def _recurrent(view: NodeView) -> list[Info | None]:
    """Y [seq, directions, batch, hidden], Y_h (and LSTM's Y_c) [directions, batch, hidden]; ``layout = 1``
    puts batch first: Y [batch, seq, directions, hidden], Y_h [batch, directions, hidden]."""
    x, r = view.shape(0), view.shape(2)
    if x is None or len(x) != 3:
        return [None] * view.n_outputs
    directions = 2 if str(view.attrs.get("direction", "forward")) == "bidirectional" else 1
    hidden: Dim = int(view.attrs["hidden_size"]) if "hidden_size" in view.attrs else (
        r[2] if r is not None and len(r) == 3 else None)
    batch_first = bool(view.attrs.get("layout", 0))
    seq, batch = (x[1], x[0]) if batch_first else (x[0], x[1])
    dtype = view.dtype(0)
    y: Shape = [batch, seq, directions, hidden] if batch_first else [seq, directions, batch, hidden]
    state: Shape = [batch, directions, hidden] if batch_first else [directions, batch, hidden]
    outs: list[Info | None] = [Info(dtype, y), Info(dtype, list(state)), Info(dtype, list(state))]
    return outs[:view.n_outputs]


# quantization ----------------------------------------------------------------------------------------
@rule("QuantizeLinear")
def _quantize(view: NodeView) -> list[Info | None]:
    dtype = int(view.attrs.get("output_dtype", 0)) or view.dtype(2) or TensorProto.UINT8
    return [Info(dtype, view.shape(0))]


@rule("DequantizeLinear")
def _dequantize(view: NodeView) -> list[Info | None]:
    dtype = int(view.attrs.get("output_dtype", 0)) or view.dtype(1) or TensorProto.FLOAT
    return [Info(dtype, view.shape(0))]


@rule("DynamicQuantizeLinear")
def _dynamic_quantize(view: NodeView) -> list[Info | None]:
    return [Info(TensorProto.UINT8, view.shape(0)), Info(TensorProto.FLOAT, []), Info(TensorProto.UINT8, [])]


# generators ---------------------------------------------------------------------------------------------
@rule("EyeLike", "RandomNormalLike", "RandomUniformLike")
def _like(view: NodeView) -> list[Info | None]:
    return [Info(int(view.attrs.get("dtype", 0)) or view.dtype(0), view.shape(0))]


@rule("RandomNormal", "RandomUniform")
def _random(view: NodeView) -> list[Info | None]:
    shape = view.attrs.get("shape")
    return [Info(int(view.attrs.get("dtype", TensorProto.FLOAT)), None if shape is None else [int(d) for d in shape])]


@rule("HannWindow", "HammingWindow", "BlackmanWindow")
def _window(view: NodeView) -> list[Info | None]:
    size = _scalar(view, 0)
    return [Info(int(view.attrs.get("output_datatype", TensorProto.FLOAT)),
                 [size if isinstance(size, (int, Expr)) else None])]


# sizes only the data decides -------------------------------------------------------------------------------
@rule("Compress")
def _compress(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    if x is None:
        return [None]
    if "axis" not in view.attrs:
        return [Info(view.dtype(0), [view.fresh("compress")])]
    axis = _axis(int(view.attrs["axis"]), len(x))
    if axis is None:
        return [None]
    return [Info(view.dtype(0), [*x[:axis], view.fresh("compress"), *x[axis + 1:]])]


@rule("NonMaxSuppression")
def _non_max_suppression(view: NodeView) -> list[Info | None]:
    return [Info(TensorProto.INT64, [view.fresh("selected"), 3])]


@rule("Unique")
def _unique(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    count = view.fresh("unique")
    if "axis" in view.attrs and x is not None:
        axis = _axis(int(view.attrs["axis"]), len(x))
        y: Shape | None = None if axis is None else [*x[:axis], count, *x[axis + 1:]]
    else:
        y = [count]
    outs: list[Info | None] = [Info(view.dtype(0), y), Info(TensorProto.INT64, [count]),
                               Info(TensorProto.INT64, [None if x is None else (product(x) if "axis" not in view.attrs
                                                                                else None)]),
                               Info(TensorProto.INT64, [count])]
    if "axis" in view.attrs and x is not None:
        axis = _axis(int(view.attrs["axis"]), len(x))
        outs[2] = Info(TensorProto.INT64, [None if axis is None else x[axis]])
    return outs[:view.n_outputs]


# sampling -----------------------------------------------------------------------------------------------
@rule("RoiAlign")
def _roi_align(view: NodeView) -> list[Info | None]:
    x, rois = view.shape(0), view.shape(1)
    rows = rois[0] if rois else None
    channels = x[1] if x is not None and len(x) == 4 else None
    return [Info(view.dtype(0), [rows, channels, int(view.attrs.get("output_height", 1)),
                                 int(view.attrs.get("output_width", 1))])]


@rule("MaxRoiPool")
def _max_roi_pool(view: NodeView) -> list[Info | None]:
    x, rois = view.shape(0), view.shape(1)
    pooled = [int(d) for d in view.attrs.get("pooled_shape", [])]
    if x is None or len(x) != 4 or len(pooled) != 2:
        return [None]
    return [Info(view.dtype(0), [rois[0] if rois else None, x[1], *pooled])]


@rule("GridSample")
def _grid_sample(view: NodeView) -> list[Info | None]:
    x, grid = view.shape(0), view.shape(1)
    if x is None or grid is None or len(grid) != len(x) or len(x) < 3:
        return [None]
    return [Info(view.dtype(0), [x[0], x[1], *grid[1:-1]])]


@rule("AffineGrid")
def _affine_grid(view: NodeView) -> list[Info | None]:
    size = view.dims(1)
    if size is None or len(size) not in (4, 5):
        return [None]
    return [Info(view.dtype(0), [size[0], *size[2:], len(size) - 2])]


@rule("CenterCropPad")
def _center_crop_pad(view: NodeView) -> list[Info | None]:
    x, target = view.shape(0), view.dims(1)
    if x is None or target is None:
        return [None]
    axes = [_axis(int(a), len(x)) for a in view.attrs.get("axes", range(len(x)))]
    if None in axes or len(axes) != len(target):
        return [None]
    shape: Shape = list(x)
    for axis, size in zip(axes, target, strict=True):
        shape[axis] = size  # type: ignore[index]
    return [Info(view.dtype(0), shape)]


@rule("MaxUnpool")
def _max_unpool(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    given = view.dims(2) if view.has_input(2) else None
    if given is not None:
        return [Info(view.dtype(0), list(given))]
    kernel = list(view.attrs.get("kernel_shape", []))
    if x is None or len(kernel) != len(x) - 2:
        return [None]
    rank = len(kernel)
    strides = list(view.attrs.get("strides", [1] * rank))
    pads = list(view.attrs.get("pads", [0] * (2 * rank)))
    spatial: Shape = [None if d is None else dim_sub(dim_add(mul(dim_sub(d, 1), strides[i]), kernel[i]),
                                                      pads[i] + pads[i + rank]) for i, d in enumerate(x[2:])]
    return [Info(view.dtype(0), [x[0], x[1], *spatial])]


@rule("DeformConv")
def _deform_conv(view: NodeView) -> list[Info | None]:
    x, w = view.shape(0), view.shape(1)
    if x is None or w is None or len(x) < 3:
        return [None]
    kernel = list(view.attrs.get("kernel_shape", [])) or w[2:]
    return [Info(view.dtype(0), [x[0], w[0], *_spatial(view, x, kernel)])]


@rule("Det")
def _det(view: NodeView) -> list[Info | None]:
    x = view.shape(0)
    return [None if x is None or len(x) < 2 else Info(view.dtype(0), x[:-2])]
