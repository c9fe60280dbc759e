"""Profilers of normalizations, reductions and the other ops that read every element once.

LayerNormalization counts the ops exporters decompose it into (see ``LAYERNORM``), so fusing a decomposed
norm keeps the total. BatchNormalization (inference) is a scale and a shift per element.
"""

from __future__ import annotations

from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import OpCost, hookimpl
from gsrewrite_builtins.profilers import (
    ADD,
    CMP,
    DIV,
    EXP,
    LAYERNORM,
    LAYERNORM_ROW,
    MUL,
    RMSNORM,
    cost,
    dims,
    input_elements,
    is_standard,
    output_elements,
)


def rows(tensor: Any, axis: int) -> Any:
    shape = dims(tensor)
    if shape is None:
        return None
    axis = axis + len(shape) if axis < 0 else axis
    total: Any = 1
    for d in shape[:axis]:
        total = total * d
    return total


def norm_macs(elements: Any, row_count: Any, per_element: int, per_row: int = LAYERNORM_ROW) -> Any:
    if elements is None or row_count is None:
        return None
    return elements * per_element + row_count * per_row


def profile_layer_norm(node: gs.Node, context: Any) -> OpCost:
    per = RMSNORM if node.op == "RMSNormalization" else LAYERNORM
    axis = int(node.attrs.get("axis", -1))
    return cost(node, norm_macs(input_elements(node), rows(node.inputs[0], axis), per))


def profile_instance_norm(node: gs.Node, context: Any) -> OpCost:
    return cost(node, norm_macs(input_elements(node), rows(node.inputs[0], 2), LAYERNORM))


def profile_group_norm(node: gs.Node, context: Any) -> OpCost:
    groups = int(node.attrs.get("num_groups", 1))
    batch = rows(node.inputs[0], 1)
    return cost(node, norm_macs(input_elements(node), None if batch is None else batch * groups, LAYERNORM))


#: ops every runtime folds a following inference BatchNormalization into (its scale and shift join the weights)
FOLDS_BATCHNORM = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def profile_batch_norm(node: gs.Node, context: Any) -> OpCost:
    """A scale and a shift per element. After a Conv/Gemm/MatMul, which every runtime (and gsrewrite's optimize)
    folds it into, the scale is free (it joins the weights) and the shift is the bias add the folded op gains:
    one add per element when the producer has no bias yet, else nothing. A model counts the same before and
    after the fold."""
    out = output_elements(node)
    name = node.inputs[0].name
    producer = context.producer_op(name) if hasattr(context, "producer_op") else None
    if producer in FOLDS_BATCHNORM:
        bias_index = 2
        has_bias = context.producer_input_count(name) > bias_index
        return cost(node, 0 if has_bias else (None if out is None else out * ADD))
    return cost(node, None if out is None else out * (MUL + ADD))


def profile_lrn(node: gs.Node, context: Any) -> OpCost:
    """x / (bias + alpha / size * sum of squares over ``size`` channels) ** beta: per element, ``size`` squares
    and adds, then an add, a power (exp-priced) and a divide."""
    out = output_elements(node)
    size = int(node.attrs.get("size", 1))
    return cost(node, None if out is None else out * (size * (MUL + ADD) + ADD + EXP + DIV))


def profile_reduce(node: gs.Node, context: Any) -> OpCost:
    """Reductions read every input element once (an add or a compare each)."""
    x = input_elements(node)
    per = CMP if node.op in ("ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK") else ADD
    if node.op in ("ReduceSumSquare", "ReduceL2"):
        per = MUL + ADD
    return cost(node, None if x is None else x * per)


PROFILERS = {
    "LayerNormalization": profile_layer_norm,
    "RMSNormalization": profile_layer_norm,
    "InstanceNormalization": profile_instance_norm,
    "GroupNormalization": profile_group_norm,
    "BatchNormalization": profile_batch_norm,
    "LRN": profile_lrn,
    **dict.fromkeys(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK",
                     "CumSum"), profile_reduce),
}


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    profiler = PROFILERS.get(node.op) if is_standard(node) else None
    return profiler(node, context) if profiler is not None else None
