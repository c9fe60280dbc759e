"""Evaluate one ONNX node on constant inputs: numpy kernels for the common ops, onnx.reference for the rest.

Constant folding calls :func:`evaluate` once per foldable node. Building an ``onnx.reference`` evaluator
costs about a millisecond, too slow for the hundreds of shape-arithmetic nodes of an exported transformer,
so the ops that dominate those subgraphs (Gather, Unsqueeze, Concat, Cast, Slice, integer arithmetic, ...)
have numpy kernels that follow the ONNX semantics exactly. Anything a kernel does not handle (an unusual
dtype, an attribute it does not know) falls back to ``onnx.reference``; a node neither can evaluate is left
alone (``None``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

log = logging.getLogger(__name__)

Values = list[np.ndarray | None]
Kernel = Callable[[Values, dict[str, Any], int], np.ndarray]


class _Unsupported(Exception):
    """The kernel does not handle this case; use the reference implementation."""


def evaluate(node: gs.Node, values: Values, opset: int) -> list[np.ndarray] | None:
    """The outputs of ``node`` for input ``values`` (``None`` for omitted inputs), or ``None`` if unknown."""
    kernel = KERNELS.get(node.op)
    if kernel is not None and len(node.outputs) == 1:
        try:
            with np.errstate(all="ignore"):
                return [np.asarray(kernel(values, node.attrs, opset))]
        except (_Unsupported, ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
            pass
        except MemoryError:  # callers check cost() first; never fatal
            log.warning("not enough memory to evaluate %s (%s)", node.name, node.op)
            return None
    return _reference(node, values, opset)


# --- kernels --------------------------------------------------------------------------------------------
def _numeric(*arrays: np.ndarray | None) -> list[np.ndarray]:
    """``arrays``, when every one is a numeric array (else the kernel does not apply)."""
    checked = []
    for a in arrays:
        if a is None or a.dtype.kind not in "biuf" or a.dtype.itemsize > 8 or a.dtype.names:
            raise _Unsupported
        checked.append(a)
    return checked


def _data(values: Values, index: int = 0) -> np.ndarray:
    """Input ``index`` of any type; a missing one means the kernel does not apply."""
    value = values[index] if index < len(values) else None
    if value is None:
        raise _Unsupported
    return value


def _ints(value: np.ndarray | None) -> list[int]:
    if value is None:
        raise _Unsupported
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _operand(values: Values, attrs: dict[str, Any], name: str, index: int, opset: int, since: int) -> list[int] | None:
    """An operand that moved from attribute to input at opset ``since`` (Squeeze/Unsqueeze axes, ...)."""
    if opset >= since:
        return _ints(values[index]) if len(values) > index and values[index] is not None else None
    value = attrs.get(name)
    return None if value is None else [int(v) for v in value]


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], *, logical: bool = False) -> Kernel:
    def kernel(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
        a, b = _numeric(*values)
        if a.dtype != b.dtype:
            raise _Unsupported
        out = fn(a, b)
        return np.asarray(out) if logical else np.asarray(out).astype(a.dtype, copy=False)

    return kernel


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a / b
    if np.any(b == 0):
        raise _Unsupported
    quotient = np.abs(a) // np.abs(b)  # ONNX integer division truncates toward zero
    return np.where((a < 0) != (b < 0), -quotient, quotient)


def _variadic(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def kernel(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
        arrays = _numeric(*values)
        out = arrays[0]
        for v in arrays[1:]:
            if v.dtype != out.dtype:
                raise _Unsupported
            out = fn(out, v)
        return np.asarray(out)

    return kernel


def _unary(fn: Callable[[np.ndarray], np.ndarray], kinds: str = "biuf") -> Kernel:
    def kernel(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
        (x,) = _numeric(*values)
        if x.dtype.kind not in kinds:
            raise _Unsupported
        return np.asarray(fn(x)).astype(x.dtype, copy=False)

    return kernel


def _cast(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    (x,) = _numeric(*values)
    target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
    if target.kind not in "biuf" or target.names or (x.dtype.kind == "f" and target.kind in "iu"
                                                         and not np.all(np.isfinite(x))):
        raise _Unsupported
    return x.astype(target)


def _reshape(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    x, shape = _data(values), _ints(values[1])
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def _unsqueeze(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    axes = _operand(values, attrs, "axes", 1, opset, 13)
    if axes is None:
        raise _Unsupported
    return np.expand_dims(_data(values), tuple(axes))


def _squeeze(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    axes = _operand(values, attrs, "axes", 1, opset, 13)
    x = _data(values)
    if axes is None:
        return np.squeeze(x)
    if any(x.shape[a] != 1 for a in axes):
        raise _Unsupported
    return np.squeeze(x, axis=tuple(axes))


def _concat(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    arrays = [_data(values, i) for i in range(len(values))]
    if len({a.dtype for a in arrays}) != 1:
        raise _Unsupported
    return np.concatenate(arrays, axis=int(attrs["axis"]))


def _gather(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    data, indices = _data(values), _data(values, 1)
    if indices is None or indices.dtype.kind not in "iu":
        raise _Unsupported
    return np.take(data, indices, axis=int(attrs.get("axis", 0)))


def _slice(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    x = _data(values)
    if opset >= 10:
        starts, ends = _ints(values[1]), _ints(values[2])
        axes = _ints(values[3]) if len(values) > 3 and values[3] is not None else list(range(len(starts)))
        steps = _ints(values[4]) if len(values) > 4 and values[4] is not None else [1] * len(starts)
    else:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes, steps = list(attrs.get("axes", range(len(starts)))), [1] * len(starts)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        index[axis] = slice_bounds(start, end, step, x.shape[axis])
    return x[tuple(index)]


def slice_bounds(start: int, end: int, step: int, dim: int) -> slice:
    """A Python slice equivalent to ONNX Slice's ``start:end:step`` on an axis of size ``dim``."""
    if step == 0:
        raise _Unsupported
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, end if end >= 0 else None, step)


def _range(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    start, limit, delta = _numeric(*values)
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    return (start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)


def _constant_of_shape(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    fill = attrs.get("value")
    value = np.asarray(fill.values).reshape(-1)[0] if isinstance(fill, gs.Constant) else np.float32(0)
    return np.full(_ints(values[0]), value, dtype=np.asarray(value).dtype)


def _expand(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    x, shape = _data(values), _ints(values[1])
    return np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))))


def _transpose(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    perm = attrs.get("perm")
    return np.transpose(_data(values), None if perm is None else [int(p) for p in perm])


def _flatten(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    x = _data(values)
    axis = int(attrs.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _where(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    cond, a, b = (_data(values, i) for i in range(3))
    if cond is None or cond.dtype != np.bool_ or a is None or b is None or a.dtype != b.dtype:
        raise _Unsupported
    return np.where(cond, a, b)


def _tile(values: Values, attrs: dict[str, Any], opset: int) -> np.ndarray:
    return np.tile(_data(values), _ints(values[1]))


KERNELS: dict[str, Kernel] = {
    "Identity": lambda values, attrs, opset: _data(values),
    "Cast": _cast,
    "Reshape": _reshape,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Gather": _gather,
    "Slice": _slice,
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Transpose": _transpose,
    "Flatten": _flatten,
    "Where": _where,
    "Tile": _tile,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
    "Equal": _binary(np.equal, logical=True),
    "Less": _binary(np.less, logical=True),
    "LessOrEqual": _binary(np.less_equal, logical=True),
    "Greater": _binary(np.greater, logical=True),
    "GreaterOrEqual": _binary(np.greater_equal, logical=True),
    "And": _binary(np.logical_and, logical=True),
    "Or": _binary(np.logical_or, logical=True),
    "Xor": _binary(np.logical_xor, logical=True),
    "Not": _unary(np.logical_not, "b"),
    "Neg": _unary(np.negative, "if"),
    "Abs": _unary(np.abs, "iuf"),
    "Sqrt": _unary(np.sqrt, "f"),
    "Reciprocal": _unary(np.reciprocal, "f"),
    "Max": _variadic(np.maximum),
    "Min": _variadic(np.minimum),
}


# --- the reference fallback -----------------------------------------------------------------------------
def _reference(node: gs.Node, values: Values, opset: int) -> list[np.ndarray] | None:
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(values)]
    feeds = {n: v for n, v in zip(names, values, strict=True) if v is not None}
    try:
        model = _single_node_model(node, names, feeds, opset)
        with np.errstate(all="ignore"):
            outputs = ReferenceEvaluator(model).run(None, feeds)
    except MemoryError:
        log.warning("not enough memory to evaluate %s (%s)", node.name, node.op)
        return None
    except Exception as exc:  # an op the reference cannot evaluate: leave it alone
        log.debug("cannot evaluate %s (%s): %s", node.name, node.op, str(exc).splitlines()[0] if str(exc) else exc)
        return None
    if not all(isinstance(v, np.ndarray) and v.dtype != object for v in outputs):
        return None  # sequences, optionals, strings: not tensors a constant can hold
    return list(outputs)


def _single_node_model(node: gs.Node, inputs: Sequence[str], feeds: dict[str, np.ndarray],
                       opset: int) -> onnx.ModelProto:
    outputs = [f"out{i}" for i in range(len(node.outputs))]
    probe = gs.Graph(nodes=[gs.Node(node.op, attrs=dict(node.attrs),
                                    inputs=[gs.Variable(n) if n else gs.Variable.empty() for n in inputs],
                                    outputs=[gs.Variable(n) for n in outputs])])
    proto_node = gs.export_onnx(probe, do_type_check=False).graph.node[0]
    graph = onnx.helper.make_graph(
        [proto_node], "fold",
        [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()],
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
