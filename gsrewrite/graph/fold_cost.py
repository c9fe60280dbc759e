"""What folding a node would cost, known from input shapes and small operands before anything is allocated.

Constant folding must not let a small hostile model allocate gigabytes: a ``ConstantOfShape`` to 2**40
elements, a ``Mul`` broadcasting two 256 KB vectors to 16 GB, a ``Pad`` by 2**40. :func:`cost` gives the
bytes of a node's outputs and the *work* of evaluating it (elements read, written or computed: a bound on
numpy's temporaries and on the time) without evaluating it:

* ops with numpy kernels, and those whose output size follows from a few operands (``Pad``, ``OneHot``,
  ``Resize``/``Upsample``), have exact size rules, computed with Python integers (no overflow);
* any other op gets its output shapes from ONNX shape inference on a one-node model in which the small
  operands are initializers and the large ones typed inputs (only their shapes are read);
* ops whose output size depends on the data (``NonZero``, ``Unique``, ``Compress``) are bounded by their input;
  anything still unknown is not folded.

Large constant operands are described by :class:`Shaped` (shape and dtype only): estimating never loads
or copies a weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import onnx
import onnx_graphsurgeon as gs

#: Operands with at most this many elements are read (their values may set the output size).
OPERAND_ELEMENTS = 4096
#: Integer operands beyond this magnitude make an op whose size is not ruled here unfoldable: they can only be
#: sizes far over any budget, and ONNX shape inference computes some sizes in 32 bits (onnx 1.23 infers a Split of
#: a [2**40, 4] tensor into two [0, 4] halves), so its answer for them cannot be trusted.
_LARGEST_OPERAND = 2**31 - 1
#: Ops whose onnx.reference implementation loops in Python per output element (work counts this much more).
SLOW_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv", "MaxPool", "AveragePool",
                      "LpPool", "MaxUnpool", "MaxRoiPool", "RoiAlign", "GridSample", "Col2Im", "Resize", "Upsample",
                      "NonMaxSuppression", "LRN", "AffineGrid", "CenterCropPad"})
SLOW_FACTOR = 256
_LOGICAL = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not"})


class Cost(NamedTuple):
    """What evaluating a node takes: ``nbytes`` of all its outputs, and ``work`` (elements touched)."""

    nbytes: int
    work: int


@dataclass(frozen=True)
class Shaped:
    """A large operand known by its shape and type only (its values are not read)."""

    shape: tuple[int, ...]
    itemsize: int
    elem_type: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)


Operand = np.ndarray | Shaped | None


#: What a size rule raises for operands that do not fit the op (the evaluation would fail too).
_INVALID = (ValueError, TypeError, IndexError, KeyError, AttributeError, ZeroDivisionError, OverflowError)


class _Unknown(Exception):
    """The size cannot be told before evaluating (the message says why)."""


def cost(node: gs.Node, operands: Sequence[Operand], opset: int) -> Cost | str:
    """The cost of evaluating ``node`` on ``operands`` (None for omitted inputs), or why it cannot be told."""
    try:
        elements, itemsizes = _output_sizes(node, list(operands), opset)
    except _Unknown as exc:
        return str(exc)
    except _INVALID:
        return "its operands are invalid"
    read = sum(o.size for o in operands if o is not None)
    work = read + sum(elements)
    compute = _COMPUTE.get(node.op)
    if compute is not None:
        try:
            work = max(work, compute(node, list(operands), sum(elements)))
        except _INVALID:
            return "its operands are invalid"
    if node.op in SLOW_OPS:
        work *= SLOW_FACTOR
    return Cost(sum(e * i for e, i in zip(elements, itemsizes, strict=True)), work)


def _output_sizes(node: gs.Node, operands: list[Operand], opset: int) -> tuple[list[int], list[int]]:
    rule = _SIZE_RULES.get(node.op)
    if rule is not None and len(node.outputs) == 1:
        return [rule(operands, node.attrs, opset)], [_itemsize(node, operands)]
    bounded = _DATA_DEPENDENT.get(node.op)
    if bounded is not None:
        return bounded(operands)
    for operand in operands:
        if isinstance(operand, np.ndarray) and operand.dtype.kind in "iu" and 0 < operand.size <= OPERAND_ELEMENTS \
                and float(np.max(np.abs(operand.astype(np.float64)))) > _LARGEST_OPERAND:
            raise _Unknown("an integer operand is far too large")
    try:
        model = onnx.shape_inference.infer_shapes(_shape_model(node, operands, opset), strict_mode=False)
    except Exception as exc:  # an op ONNX cannot describe: not folded
        raise _Unknown(f"shape inference failed ({type(exc).__name__})") from exc
    return _inferred(model)


# --- exact rules ----------------------------------------------------------------------------------------------
def elements(shape: Iterable[Any]) -> int:
    """The number of elements of ``shape`` (Python integers: never overflows); negative dims are invalid."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise ValueError("negative dim")
    return math.prod(dims)


def broadcast(*shapes: Sequence[int]) -> list[int]:
    """The numpy broadcast of ``shapes``, without numpy (any size)."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = {int(s[axis - rank + len(s)]) for s in shapes if axis - rank + len(s) >= 0}
        sized = dims - {1}
        if len(sized) > 1:
            raise ValueError("shapes do not broadcast")
        out.append(sized.pop() if sized else min(dims))
    return out


def _ints(operand: Operand) -> list[int]:
    if not isinstance(operand, np.ndarray) or operand.dtype.kind not in "iu":
        raise _Unknown("an operand that sets its size is not a small integer constant")
    return [int(v) for v in operand.reshape(-1)]


def _present(operands: list[Operand]) -> list[np.ndarray | Shaped]:
    if any(o is None for o in operands):
        raise _Unknown("an input is omitted")
    return operands  # type: ignore[return-value]


def _same(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    return _present(operands[:1])[0].size


def _broadcasting(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    return elements(broadcast(*(o.shape for o in _present(operands))))


def _concat(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    return sum(o.size for o in _present(operands))


def _gather(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    data, indices = _present(operands)
    axis = int(attrs.get("axis", 0)) % max(data.ndim, 1)
    return elements(data.shape[:axis] + data.shape[axis + 1:]) * indices.size


def _range(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    start, limit, delta = (np.asarray(o).reshape(-1)[0].item() for o in _present(operands))
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        if delta == 0:
            raise ValueError("delta is 0")
        return max(-((start - limit) // delta), 0)
    count = (float(limit) - float(start)) / float(delta)
    return max(math.ceil(count), 0)  # inf/nan raise OverflowError/ValueError


def _constant_of_shape(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    return elements(_ints(operands[0]))


def _expand(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    x = _present(operands[:1])[0]
    return elements(broadcast(x.shape, _ints(operands[1])))


def _tile(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    x, repeats = _present(operands[:1])[0], _ints(operands[1])
    if len(repeats) != x.ndim:
        raise ValueError("repeats do not match the rank")
    return elements(d * r for d, r in zip(x.shape, repeats, strict=True))


def _pad(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    x = _present(operands[:1])[0]
    pads = _ints(operands[1]) if opset >= 11 else [int(p) for p in attrs.get("pads", [])]
    axes = _ints(operands[3]) if len(operands) > 3 and operands[3] is not None else list(range(x.ndim))
    if len(pads) != 2 * len(axes):
        raise ValueError("pads do not match the axes")
    dims = list(x.shape)
    for i, axis in enumerate(axes):
        dims[axis] += pads[i] + pads[i + len(axes)]
    return elements(dims)


def _one_hot(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    indices, depth = _present(operands[:2])
    if not isinstance(depth, np.ndarray) or depth.size != 1:
        raise _Unknown("its depth is not a constant scalar")
    return elements([indices.size, math.ceil(float(depth.reshape(-1)[0]))])


def _resize(operands: list[Operand], attrs: dict[str, Any], opset: int) -> int:
    """Output elements of Resize/Upsample: ``sizes``, or the input's dims times ``scales`` (an upper bound)."""
    x = _present(operands[:1])[0]
    factors = _resize_operand(operands, attrs, opset, "scales")
    if factors:
        if not all(math.isfinite(f) and 0 <= f <= _LARGEST_OPERAND for f in factors):
            raise ValueError("scales out of range")
        axes = [int(a) for a in attrs.get("axes", range(x.ndim))]
        dims = list(x.shape)
        for axis, factor in zip(axes, factors, strict=True):
            dims[axis] = math.floor(dims[axis] * factor) + 1
        return elements(dims)
    sizes = [int(s) for s in _resize_operand(operands, attrs, opset, "sizes")]
    if not sizes:
        raise _Unknown("neither its scales nor its sizes are constant")
    axes = [int(a) for a in attrs.get("axes", range(x.ndim))]
    dims = list(x.shape)
    ratio = max([s / dims[a] for a, s in zip(axes, sizes, strict=True) if dims[a]] + [1.0])
    for axis, size in zip(axes, sizes, strict=True):  # keep_aspect_ratio_policy may scale all by the largest ratio
        dims[axis] = max(size, math.ceil(dims[axis] * ratio) + 1)
    return elements(dims)


def _resize_operand(operands: list[Operand], attrs: dict[str, Any], opset: int, which: str) -> list[float]:
    if opset < 9 and which == "scales":
        return [float(s) for s in attrs.get("scales", [])]
    index = {"scales": 1 if opset < 11 else 2, "sizes": 3}[which]
    operand = operands[index] if len(operands) > index else None
    if operand is None or operand.size == 0:
        return []
    if not isinstance(operand, np.ndarray):
        raise _Unknown(f"its {which} are not a small constant")
    return [float(v) for v in operand.reshape(-1)]


_SAME = ("Identity", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Slice", "Not", "Neg",
         "Abs", "Sqrt", "Reciprocal")
_BROADCASTING = ("Where", "Add", "Sub", "Mul", "Div", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
                 "And", "Or", "Xor", "Max", "Min")
_SIZE_RULES: dict[str, Callable[[list[Operand], dict[str, Any], int], int]] = {
    **dict.fromkeys(_SAME, _same), **dict.fromkeys(_BROADCASTING, _broadcasting),
    "Concat": _concat, "Gather": _gather, "Range": _range, "ConstantOfShape": _constant_of_shape, "Expand": _expand,
    "Tile": _tile, "Pad": _pad, "OneHot": _one_hot, "Resize": _resize, "Upsample": _resize,
}


def _itemsize(node: gs.Node, operands: list[Operand]) -> int:
    if node.op == "Cast":
        return type_itemsize(int(node.attrs["to"]))
    if node.op in _LOGICAL:
        return 1
    if node.op == "ConstantOfShape":
        fill = node.attrs.get("value")
        return np.asarray(fill.values).itemsize if isinstance(fill, gs.Constant) else 4
    source = operands[1] if node.op == "Where" else operands[2] if node.op == "OneHot" else operands[0]
    return source.itemsize if source is not None else 8


def type_itemsize(elem_type: int) -> int:
    """Bytes per element of ONNX type ``elem_type`` (8 for strings and unknown types)."""
    try:
        return max(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize, 1)
    except (KeyError, TypeError, ValueError):
        return 8


# --- ops whose output size depends on the data: bounded by their input --------------------------------------
def _nonzero(operands: list[Operand]) -> tuple[list[int], list[int]]:
    x = _present(operands[:1])[0]
    return [max(x.ndim, 1) * x.size], [8]


def _compress(operands: list[Operand]) -> tuple[list[int], list[int]]:
    x = _present(operands[:1])[0]
    return [x.size], [x.itemsize]


def _unique(operands: list[Operand]) -> tuple[list[int], list[int]]:
    x = _present(operands[:1])[0]
    return [x.size] * 4, [x.itemsize, 8, 8, 8]


_DATA_DEPENDENT: dict[str, Callable[[list[Operand]], tuple[list[int], list[int]]]] = {
    "NonZero": _nonzero, "Compress": _compress, "Unique": _unique,
}


# --- everything else: ONNX shape inference on a one-node model ------------------------------------------------
def _inferred(inferred: onnx.ModelProto) -> tuple[list[int], list[int]]:
    counts, itemsizes = [], []
    for info in inferred.graph.output:
        tensor_type = info.type.tensor_type
        dims = tensor_type.shape.dim if tensor_type.HasField("shape") else None
        if dims is None or not all(d.HasField("dim_value") for d in dims):
            raise _Unknown("its output shape is not known before evaluation")
        counts.append(elements(d.dim_value for d in dims))
        itemsizes.append(type_itemsize(tensor_type.elem_type))
    return counts, itemsizes


def _shape_model(node: gs.Node, operands: list[Operand], opset: int) -> onnx.ModelProto:
    names = [f"in{i}" if o is not None else "" for i, o in enumerate(operands)]
    inputs, initializers = [], []
    for name, operand in zip(names, operands, strict=True):
        if isinstance(operand, np.ndarray) and operand.size <= OPERAND_ELEMENTS and operand.dtype != object:
            initializers.append(onnx.numpy_helper.from_array(operand, name))
        elif operand is not None:
            elem_type = operand.elem_type if isinstance(operand, Shaped) \
                else onnx.helper.np_dtype_to_tensor_dtype(operand.dtype)
            inputs.append(onnx.helper.make_tensor_value_info(name, elem_type, list(operand.shape)))
    outputs = [f"out{i}" for i in range(len(node.outputs))]
    probe = gs.Graph(nodes=[gs.Node(node.op, attrs=dict(node.attrs),
                                    inputs=[gs.Variable(n) if n else gs.Variable.empty() for n in names],
                                    outputs=[gs.Variable(n) for n in outputs])])
    proto_node = gs.export_onnx(probe, do_type_check=False).graph.node[0]
    graph = onnx.helper.make_graph([proto_node], "cost", inputs,
                                   [onnx.helper.make_empty_tensor_value_info(n) for n in outputs],
                                   initializer=initializers)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])


# --- work beyond reading and writing: products and convolutions -------------------------------------------------
def _matmul(node: gs.Node, operands: list[Operand], out: int) -> int:
    a = operands[3] if node.op == "QLinearMatMul" else operands[0]
    return out * (a.shape[-1] if a is not None and len(a.shape) else 1)


def _gemm(node: gs.Node, operands: list[Operand], out: int) -> int:
    a = _present(operands[:1])[0]
    return out * (a.shape[0] if node.attrs.get("transA", 0) else a.shape[-1])


def _einsum(node: gs.Node, operands: list[Operand], out: int) -> int:
    terms = str(node.attrs["equation"]).replace(" ", "").split("->")[0].split(",")
    sizes: dict[str, int] = {}
    ellipsis = 1
    for term, operand in zip(terms, _present(list(operands)), strict=True):
        letters = term.replace("...", "")
        extra = operand.ndim - len(letters)
        if "..." in term:
            start = term.index("...")
            ellipsis = max(ellipsis, elements(operand.shape[start:start + extra]))
            term = term.replace("...", "")
            shape = operand.shape[:start] + operand.shape[start + extra:]
        else:
            shape = operand.shape
        for letter, dim in zip(term, shape, strict=True):
            sizes[letter] = max(sizes.get(letter, 1), int(dim))
    return ellipsis * elements(sizes.values())


def _conv(node: gs.Node, operands: list[Operand], out: int) -> int:
    weight = _present([operands[3] if node.op == "QLinearConv" else operands[1]])[0]
    per_output = elements(weight.shape) // max(weight.shape[0], 1)
    return (elements(_present(operands[:1])[0].shape) if node.op == "ConvTranspose" else out) * per_output


_COMPUTE: dict[str, Callable[[gs.Node, list[Operand], int], int]] = {
    "MatMul": _matmul, "MatMulInteger": _matmul, "QLinearMatMul": _matmul, "Gemm": _gemm, "Einsum": _einsum,
    "Conv": _conv, "ConvInteger": _conv, "QLinearConv": _conv, "ConvTranspose": _conv, "DeformConv": _conv,
}
