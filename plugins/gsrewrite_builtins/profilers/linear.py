"""Profilers of the matrix products: MatMul, Gemm, Einsum and their integer forms.

MACs = output elements x the contracted length; Gemm's ``C`` adds one per output element (MatMul + Add and the
Gemm made of them count the same).
"""

from __future__ import annotations

from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import OpCost, OpProfiler, hookimpl
from gsrewrite_builtins.profilers import ADD, cost, dims, has_input, is_standard, output_elements


def matmul_macs(a: list[Any] | None, out_elements: Any) -> Any:
    if a is None or not a or out_elements is None:
        return None
    return out_elements * a[-1]


def profile_matmul(node: gs.Node, context: Any) -> OpCost:
    """MACs = (elements of the output) x K, where K is the contracted dimension."""
    a_index = 0
    a = dims(node.inputs[a_index])
    out = output_elements(node)
    if out is None:
        b = dims(node.inputs[3 if node.op == "QLinearMatMul" else 1])
        out = _matmul_out_elements(a, b)
    return cost(node, matmul_macs(a, out))


def _matmul_out_elements(a: list[Any] | None, b: list[Any] | None) -> Any:
    if a is None or b is None or not a or not b:
        return None
    rows = a[-2:-1] if len(a) > 1 else []
    cols = b[-1:] if len(b) > 1 else []
    batch_a, batch_b = a[:-2], b[:-2]
    rank = max(len(batch_a), len(batch_b))
    batch = []
    for i in range(rank):
        x = batch_a[i - rank + len(batch_a)] if i - rank + len(batch_a) >= 0 else 1
        y = batch_b[i - rank + len(batch_b)] if i - rank + len(batch_b) >= 0 else 1
        batch.append(y if x == 1 else x)
    total: Any = 1
    for d in (*batch, *rows, *cols):
        total = total * d
    return total


def profile_gemm(node: gs.Node, context: Any) -> OpCost:
    """MACs = M x N x K of ``alpha * A' @ B'``, plus M x N for ``+ beta * C``."""
    a, b = dims(node.inputs[0]), dims(node.inputs[1])
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return cost(node, None)
    m, k = a[::-1] if node.attrs.get("transA", 0) else a
    n = b[0] if node.attrs.get("transB", 0) else b[1]
    macs = m * n * k
    if has_input(node, 2):
        macs = macs + m * n * ADD
    return cost(node, macs)


def profile_einsum(node: gs.Node, context: Any) -> OpCost:
    """MACs = the product of every index's size (each output element sums over the contracted indices)."""
    equation = str(node.attrs.get("equation", "")).replace(" ", "")
    if "->" not in equation or "..." in equation:
        return cost(node, None)
    sizes: dict[str, Any] = {}
    for term, tensor in zip(equation.split("->")[0].split(","), node.inputs, strict=False):
        shape = dims(tensor)
        if shape is None or len(shape) != len(term):
            return cost(node, None)
        for letter, size in zip(term, shape, strict=True):
            if sizes.get(letter) in (None, 1):
                sizes[letter] = size
    total: Any = 1
    for size in sizes.values():
        total = total * size
    return cost(node, total)


PROFILERS: dict[str, OpProfiler] = {
    "MatMul": profile_matmul,
    "MatMulInteger": profile_matmul,
    "QLinearMatMul": profile_matmul,
    "Gemm": profile_gemm,
    "Einsum": profile_einsum,
}


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    profiler = PROFILERS.get(node.op) if is_standard(node) else None
    return profiler(node, context) if profiler is not None else None
