"""Profilers of the matrix products: MatMul, Gemm, Einsum and their integer forms, and the recurrent cells built
on them (LSTM, GRU, RNN).

MACs = output elements x the contracted length; Gemm's ``C`` adds one per output element (MatMul + Add and the
Gemm made of them count the same).
"""

from __future__ import annotations

from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import OpCost, OpProfiler, hookimpl
from gsrewrite_builtins.profilers import ADD, MUL, SIGMOID, TANH, cost, dims, has_input, is_standard, output_elements


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


#: per gate row of a recurrent cell, besides its matrix products: the elementwise work (see profile_recurrent)
_CELL_ELEMENTWISE = {
    # i, o, f sigmoids; g and c tanhs; c = f*c + i*g; h = o*tanh(c); the W x + R h adds
    "LSTM": 3 * SIGMOID + 2 * TANH + 2 * MUL + ADD + MUL + 4 * ADD,
    # z, r sigmoids; h' tanh; r * h; h = (1 - z) * h' + z * h; the W x + R h adds
    "GRU": 2 * SIGMOID + TANH + MUL + (ADD + 2 * MUL + ADD) + 3 * ADD,
    # h = tanh(W x + R h + b)
    "RNN": TANH + ADD,
}


def profile_recurrent(node: gs.Node, context: Any) -> OpCost:
    """LSTM, GRU, RNN: per direction, time step and batch row, the gates' matrix products (gates x hidden x
    (input + hidden)), the biases (two per gate row), the peepholes (LSTM: 3 multiply-adds per hidden unit) and
    the cell's elementwise work (activations as the elementwise table counts them)."""
    x, w = dims(node.inputs[0]), dims(node.inputs[1])
    r = dims(node.inputs[2]) if has_input(node, 2) else None
    if x is None or w is None or r is None or len(x) != 3 or len(w) != 3 or len(r) != 3:
        return cost(node, None)
    directions, rows, inputs = w
    hidden = r[2]
    seq, batch = (x[1], x[0]) if node.attrs.get("layout", 0) else (x[0], x[1])
    per_step = rows * (inputs + hidden) + hidden * _CELL_ELEMENTWISE[node.op]
    if has_input(node, 3):
        per_step = per_step + 2 * rows * ADD
    if node.op == "LSTM" and has_input(node, 7):
        per_step = per_step + 3 * hidden * (MUL + ADD)
    return cost(node, directions * seq * batch * per_step)


PROFILERS: dict[str, OpProfiler] = {
    "LSTM": profile_recurrent,
    "GRU": profile_recurrent,
    "RNN": profile_recurrent,
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
