"""Check of the attention patterns that absorb SDPA's NaN guard: the additive mask can never be -inf.

The dynamo exporter writes ``Where(IsNaN(p), 0, p)`` after the softmax: a query row whose every score is -inf
(a fully masked row) has NaN probabilities in plain softmax, and the guard makes its context 0. The fused
MultiHeadAttention / Attention / GroupQueryAttention has no such guard (NaN or uniform weights there). So the
guard may only be absorbed when no row can be all -inf, that is when the mask is *finite* for every input
(finite scores plus a finite mask give finite softmax inputs: the guard is then the identity, and a row masked
with float32's lowest gets the same uniform weights in the original and the fused op).

:func:`finite_mask` proves that from the mask's computation, op by op, without running it: constants must be
finite, graph inputs it reads must be integer/bool (a float mask input may hold -inf), and every node must be
one that cannot make a non-finite value from finite ones (moves, selections, comparisons, casts from integers;
no arithmetic on floats, which can overflow: ``lowest + lowest`` is -inf). Integer and bool tensors are finite
whatever computes them. The exporters' masks (``Where(mask, 0, lowest)`` over Range/GatherND/Expand grids)
pass; a raw float mask input, a ``-inf`` filter or a sum of two biases is refused.

Left out: non-finite *scores* (NaN in Q/K, or Q K^T overflowing) are not masks' doing; the guard maps those rows
to 0 in the original and the fused op does not.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import Match, reads

#: Ops whose outputs are (parts of) their data inputs: finite when those are.
MOVES = frozenset({"Identity", "Reshape", "Expand", "Unsqueeze", "Squeeze", "Transpose", "Flatten", "Slice",
                   "Gather", "GatherND", "GatherElements", "Concat", "Tile", "Where", "Max", "Min"})
#: Inputs of these ops that only index, select or size (not copied into the output).
INDEX_INPUTS = {"Where": {0}, "Gather": {1}, "GatherND": {1}, "GatherElements": {1}, "Reshape": {1},
                "Expand": {1}, "Unsqueeze": {1}, "Squeeze": {1}, "Slice": {1, 2, 3, 4}, "Tile": {1}}
#: Ops whose outputs are integers or booleans (finite by type) or sizes.
DISCRETE = frozenset({"Shape", "Size", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or",
                      "Xor", "Not", "IsNaN", "IsInf", "ArgMax", "ArgMin", "NonZero"})
#: Guard nodes of the NanGuard fragment (mha.toml): present when the guard form matched.
GUARD_LABEL = "nan_guard/isnan"
#: Most nodes the proof follows back from the mask.
MAX_NODES = 200


class _Unproven(Exception):
    """Why the mask may be non-finite."""


@reads("mask", "nan_guard/isnan")
def finite_mask(match: Match) -> str | None:
    """Without a NaN guard, or without a mask: nothing to prove. With both: the mask is finite for every input."""
    if match.node(GUARD_LABEL) is None:
        return None
    mask = match.tensor("mask")
    if mask is None:
        return None
    try:
        _prove_finite(match.graph, mask)
    except _Unproven as exc:
        return (f"the NaN guard cannot be absorbed: {exc}; a fully masked (-inf) row is 0 in the original and "
                "not in the fused op")
    return None


def _prove_finite(graph: gs.Graph, tensor: gs.Tensor) -> None:
    """Raise _Unproven unless every value of ``tensor`` is finite for every input of the graph."""
    graph_inputs = {id(t) for t in graph.inputs}
    pending, seen = [tensor], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if len(seen) > MAX_NODES:
            raise _Unproven(f"the mask's computation is larger than {MAX_NODES} tensors")
        if _discrete(current):
            continue
        if isinstance(current, gs.Constant):
            if not np.all(np.isfinite(current.values)):
                raise _Unproven(f"the mask's constant '{current.name}' holds non-finite values")
            continue
        if id(current) in graph_inputs or not current.inputs:
            raise _Unproven(f"the mask reads the float input '{current.name}', which may hold -inf")
        pending.extend(_finite_if(current.inputs[0], current))


def _discrete(tensor: gs.Tensor) -> bool:
    """An integer or bool tensor (finite by type)."""
    dtype = tensor.values.dtype if isinstance(tensor, gs.Constant) else tensor.dtype
    if dtype is None:
        return False
    if isinstance(dtype, int):
        dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    return np.dtype(dtype).kind in "biu"


def _finite_if(node: gs.Node, output: gs.Tensor) -> list[gs.Tensor]:
    """The tensors whose finiteness makes ``output`` of ``node`` finite (else _Unproven)."""
    if node.op in DISCRETE:
        return []
    if node.op == "ConstantOfShape":
        value = node.attrs.get("value")
        values = value.values if isinstance(value, gs.Constant) else np.zeros(1)
        if not np.all(np.isfinite(values)):
            raise _Unproven(f"'{node.name}' fills with a non-finite value")
        return []
    if node.op == "Cast":
        return _cast_source(node)
    if node.op in MOVES:
        skip = INDEX_INPUTS.get(node.op, set())
        return [t for i, t in enumerate(node.inputs) if i not in skip and t.name]
    raise _Unproven(f"'{output.name}' is computed by {node.op}, which may make -inf from finite values")


def _cast_source(node: gs.Node) -> list[gs.Tensor]:
    """A Cast keeps finite values finite unless it narrows floats (float64 1e300 -> float32 inf)."""
    source = node.inputs[0]
    if _discrete(source):
        return []
    to = int(node.attrs.get("to", onnx.TensorProto.FLOAT))
    if to in (onnx.TensorProto.DOUBLE,) or (to == onnx.TensorProto.FLOAT and source.dtype is not None
                                             and np.dtype(source.dtype) in (np.float16, np.float32)):
        return [source]
    raise _Unproven(f"'{node.name}' casts '{source.name}' to a type that may overflow")


CHECKS = {"finite_mask": finite_mask}
