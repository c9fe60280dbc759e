"""Constant folding: nodes whose value is known before the model runs become constants.

A node is folded when every input is a constant, or when it only needs what shape inference already knows
(``Shape``/``Size`` of a tensor whose shape is static, ``CastLike`` of a constant to a known dtype). Values
come from numpy kernels, or ``onnx.reference`` for the less common ops (:mod:`gsrewrite.graph.evaluate`).

Folding never bloats the model. A folded value must fit in ``max_bytes``, and it may exceed the constants
it frees (inputs that only this node reads) by at most :data:`GROWTH_ALLOWANCE` bytes. So an ``Expand``,
``Tile``, ``ConstantOfShape`` or ``Range`` that blows a few bytes up into a large tensor stays a node, while
shape arithmetic and weight preprocessing (``Transpose(W)``, ``Mul(W, scale)``) fold.

Those limits are checked *before* evaluating: the output size comes from the input shapes and the small
operands that set it (:func:`gsrewrite.graph.fold_cost.cost`), and so does the work of the
evaluation (elements read, written or computed, which bounds numpy's temporaries and the time), capped at
:func:`work_limit`. A node over a limit, or whose output size cannot be told without evaluating it, is not
evaluated; the reason goes to ``skipped`` and the log. So a 200-byte model cannot make folding allocate
gigabytes.

Nodes are visited in topological order, so whole constant chains fold in one call. Random ops, control
flow, sequence ops and ``Dropout`` are never folded, and neither are nodes whose outputs are graph outputs
or are read inside subgraphs (the scope of those names must not change).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto
from onnx_graphsurgeon.ir.tensor import LazyValues, SparseValues

from gsrewrite.graph.core import constant_values, is_empty, may_hold_subgraphs, subgraph_outer_names
from gsrewrite.graph.evaluate import evaluate
from gsrewrite.graph.fold_cost import OPERAND_ELEMENTS, Cost, Operand, Shaped, cost, type_itemsize

log = logging.getLogger(__name__)

#: Default cap on the size of one folded tensor (``--max-fold-bytes``).
DEFAULT_MAX_BYTES = 1 << 20
#: How many bytes a folded value may add beyond the constants it makes unnecessary.
GROWTH_ALLOWANCE = 4096
#: Elements an evaluation may touch per byte of ``max_bytes``, and at least (see :func:`work_limit`).
WORK_PER_BYTE = 256
MIN_WORK = 1 << 24
_INT64_MAX = 2**63 - 1
#: Never folded: random ops, ops with side effects or subgraphs, and ops whose value is not a function of
#: their inputs.
NEVER_FOLD = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "If", "Loop", "Scan", "SequenceConstruct", "SequenceAt", "SequenceInsert", "SequenceEmpty", "SequenceErase",
    "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
    "OptionalHasElement", "Dropout", "Constant",
})


def fold_constants(graph: gs.Graph, max_bytes: int = DEFAULT_MAX_BYTES, skipped: dict[str, str] | None = None) -> int:
    """Fold what can be folded in ``graph`` (not its subgraphs); returns the number of folded nodes.

    ``graph.nodes`` must be in topological order. Folded nodes are removed from the graph; constants that
    nobody reads any more simply disappear from it. Nodes left alone because of the size or work limits are
    recorded in ``skipped`` (node name, or ``op -> first output`` for unnamed nodes -> reason).
    """
    protected = {id(t) for t in graph.outputs} | {id(t) for t in graph.inputs}
    outer = subgraph_outer_names(graph) if any(may_hold_subgraphs(n) for n in graph.nodes) else set()
    opset = int(graph.opset)
    folded: set[int] = set()
    for node in graph.nodes:
        if not _foldable(node, protected, outer):
            continue
        reason = _over_budget(node, opset, max_bytes)
        if reason is None:
            values = _values(node, opset)
            if values is None or len(values) != len(node.outputs):
                continue
            reason = _size_reason(node, sum(np.asarray(v).nbytes for v in values), max_bytes)
        if reason is not None:
            _skip(node, reason, skipped)
            continue
        assert values is not None  # evaluated above: no reason to skip
        for tensor, value in zip(list(node.outputs), values, strict=True):
            tensor.to_constant(np.asarray(value))
        node.outputs.clear()
        node.inputs.clear()
        folded.add(id(node))
    if folded:
        graph.nodes = [n for n in graph.nodes if id(n) not in folded]
    return len(folded)


def work_limit(max_bytes: int) -> int:
    """The most elements one evaluation may read, write or compute when folded tensors are capped at ``max_bytes``."""
    return max(WORK_PER_BYTE * max_bytes, MIN_WORK)


def _skip(node: gs.Node, reason: str, skipped: dict[str, str] | None) -> None:
    growth = reason.startswith("its output (")  # the ordinary Expand/Tile case: only logged with --debug
    log.log(logging.DEBUG if growth else logging.INFO, "not folding %s (%s): %s", node.name, node.op, reason)
    if skipped is not None:
        skipped[node.name or f"{node.op} -> {node.outputs[0].name}"] = reason


def _over_budget(node: gs.Node, opset: int, max_bytes: int) -> str | None:
    """Why ``node`` must not be evaluated (over a limit, or its size unknown), from shapes alone; else None."""
    if node.op in ("Shape", "Size"):
        return None  # a few integers (Size: checked in _values)
    if node.op == "CastLike":
        estimate: Cost | str = Cost(math.prod(node.inputs[0].shape) * np.dtype(node.inputs[1].dtype).itemsize, 0)
    else:
        estimate = cost(node, [_operand(t) for t in node.inputs], opset)
    if isinstance(estimate, str):
        return estimate
    reason = _size_reason(node, estimate.nbytes, max_bytes)
    if reason is None and estimate.work > work_limit(max_bytes):
        reason = f"evaluating it would touch {estimate.work:,} elements (limit {work_limit(max_bytes):,})"
    return reason


def _operand(tensor: gs.Tensor) -> Operand:
    """A constant input for :func:`cost`: its values when small or loaded, else its shape and type only."""
    if is_empty(tensor):
        return None
    stored = tensor._values
    if isinstance(stored, LazyValues) and math.prod(stored.shape) > OPERAND_ELEMENTS:
        sparse = isinstance(stored, SparseValues)  # densified as float64 by onnx-graphsurgeon
        data_type = TensorProto.DOUBLE if sparse else stored.tensor.data_type
        return Shaped(tuple(int(d) for d in stored.shape), type_itemsize(data_type), data_type)
    return constant_values(tensor)


def _foldable(node: gs.Node, protected: set[int], outer: set[str]) -> bool:
    if node.domain not in (None, "", "ai.onnx") or node.op in NEVER_FOLD or not node.outputs or not node.inputs:
        return False
    if any(id(t) in protected or t.name in outer or not isinstance(t, gs.Variable) for t in node.outputs):
        return False
    if node.op == "Shape":
        return _shape_slice(node) is not None
    if node.op == "Size":
        return _static_shape(node.inputs[0])
    if node.op == "CastLike":  # only the dtype of the second input matters
        return len(node.inputs) == 2 and isinstance(node.inputs[0], gs.Constant) and _known_dtype(node.inputs[1])
    return all(isinstance(t, gs.Constant) or is_empty(t) for t in node.inputs)


def _values(node: gs.Node, opset: int) -> list[np.ndarray] | None:
    if node.op == "Shape":
        return [np.array(_shape_slice(node), dtype=np.int64)]
    if node.op == "Size":
        size = math.prod(node.inputs[0].shape)
        return [np.array(size, dtype=np.int64)] if size <= _INT64_MAX else None
    if node.op == "CastLike":
        return [constant_values(node.inputs[0]).astype(np.dtype(node.inputs[1].dtype))]
    inputs = [None if is_empty(t) else constant_values(t) for t in node.inputs]
    return evaluate(node, inputs, opset)


def _shape_slice(node: gs.Node) -> list[int] | None:
    """The dims a ``Shape`` node returns (``start``/``end`` applied) when all of them are static."""
    shape = node.inputs[0].shape
    if shape is None:
        return None
    rank = len(shape)
    start, end = int(node.attrs.get("start", 0)), node.attrs.get("end")
    end = rank if end is None else int(end)
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    dims = list(shape[start:end])
    return dims if all(isinstance(d, int) and d >= 0 for d in dims) else None


def _size_reason(node: gs.Node, size: int, max_bytes: int) -> str | None:
    """Why an output of ``size`` bytes must not replace ``node``: over the cap, or growing the model; else None."""
    if size > max_bytes:
        return f"its output would be {size:,} bytes (over --max-fold-bytes {max_bytes:,})"
    if size <= 64:  # a handful of numbers: smaller than the node it replaces
        return None
    freed = sum(_nbytes(t) for t in _distinct(node.inputs)
                if isinstance(t, gs.Constant) and all(c is node for c in t.outputs))
    if size > freed + GROWTH_ALLOWANCE:
        return f"its output ({size:,} bytes) would grow the model by {size - freed:,} bytes"
    return None


def _distinct(tensors: list[gs.Tensor]) -> list[gs.Tensor]:
    return list({id(t): t for t in tensors}.values())


def _nbytes(tensor: gs.Constant) -> int:
    dtype = tensor.dtype
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:
        itemsize = 1
    return math.prod(tensor.shape) * itemsize


def _known_dtype(tensor: gs.Tensor) -> bool:
    if tensor.dtype is None:
        return False
    try:
        np.dtype(tensor.dtype)
    except TypeError:
        return False
    return True


def _static_shape(tensor: gs.Tensor) -> bool:
    return tensor.shape is not None and all(isinstance(d, int) and d >= 0 for d in tensor.shape)
