"""matmul-add: MatMul + Add on 2-D operands as one Gemm (also the ``fuse-matmul-add`` simplify pass)."""

from __future__ import annotations

from collections.abc import Callable

import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import Match, reads


@reads("a", "b", "bias")
def gemm_compatible(match: Match) -> str | None:
    """MatMul + Add is a valid Gemm: 2-D A, constant 2-D B, bias broadcastable to [M, N] along rows. Shapes only:
    the weights' values are never read (loading a weight per candidate was measured:
    benchmarks/results/code_figures.md)."""
    a_shape = match.shape("a")
    if a_shape is None or len(a_shape) != 2:
        return f"A has rank {len(a_shape) if a_shape is not None else 'unknown'}, Gemm needs 2"
    b, bias = match.shape("b"), match.shape("bias")
    if not _is_constant(match, "b") or b is None or len(b) != 2:
        return "B is not a constant matrix"
    if not _is_constant(match, "bias") or bias is None or len(bias) > 2 or (bias and bias[-1] not in (1, b[1])):
        return "the bias does not broadcast along Gemm's output rows"
    if len(bias) == 2 and bias[0] != 1 and bias[0] != a_shape[0]:
        return f"bias shape {list(bias)} does not fit [M, N]"
    return None


def _is_constant(match: Match, name: str) -> bool:
    return isinstance(match.tensor(name), gs.Constant)


CHECKS: dict[str, Callable[[Match], str | None]] = {
    "gemm_compatible": gemm_compatible,
}
