"""Check and computations of ``linear-3d``: a flattened Gemm back to a MatMul over the N-D input.

``Reshape(x, [-1, K]) -> Gemm -> Reshape(., target)`` equals ``MatMul(x, W) + c`` exactly when the first
Reshape keeps x's last axis (so it merges only the leading axes, in order) and the second gives back x's
leading axes with the Gemm's N last. Both are read from the inferred shapes: a dim is the same when it is the
same number or the same symbolic name (ONNX gives one name one value), never assumed for unknown dims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gsrewrite.plugin_api import CheckFailed, Match, reads


@reads("gemm", "w", "x", "x2", "y", optional=("c",))
def flattened_linear(match: Match) -> str | None:
    """x of rank >= 3 is flattened to [M, K] and the Gemm's [M, N] is restored to x's leading axes + [N]."""
    x, flat, out = match.shape("x"), match.shape("x2"), match.shape("y")
    if x is None or len(x) < 3:
        return f"x has shape {x}: not an N-D input (rank >= 3) whose leading axes were flattened"
    if flat is None or len(flat) != 2 or not _same(flat[1], x[-1]):
        return f"x {x} is reshaped to {flat}, not to [-1, {x[-1]}] (its last axis kept)"
    weight, bias = match.constant("w"), match.constant("c")
    if weight is None or weight.ndim != 2:
        return "the Gemm weight is not a constant matrix"
    transposed = match.node("gemm").attrs.get("transB", 0) == 1
    k, n = (weight.shape[1], weight.shape[0]) if transposed else weight.shape
    if isinstance(x[-1], int) and x[-1] != k:
        return f"the weight has {k} rows for a last axis of {x[-1]}"
    if match.tensor("c") is not None and (bias is None or bias.size != n or bias.ndim > 2
                                          or (bias.ndim == 2 and bias.shape[0] != 1)):
        return f"the Gemm bias has shape {list(bias.shape) if bias is not None else None}, not [{n}] or [1, {n}]"
    if out is None or len(out) != len(x) or not _same(out[-1], n) \
            or not all(_same(a, b) for a, b in zip(out[:-1], x[:-1], strict=True)):
        return f"the result is reshaped to {out}, not to x's leading axes {x[:-1]} + [{n}]"
    return None


@reads("c")
def gemm_bias_vector(match: Match) -> np.ndarray:
    """The Gemm bias as a 1-D vector (what MatMul's output adds along its last axis)."""
    bias = match.constant("c")
    if bias is None:
        raise CheckFailed("the Gemm bias is not a constant")
    return bias.reshape(-1)


@reads("w")
def gemm_weight_kn(match: Match) -> np.ndarray:
    """A transB = 1 Gemm weight ([N, K]) as MatMul's [K, N]."""
    weight = match.constant("w")
    if weight is None or weight.ndim != 2:
        raise CheckFailed("the Gemm weight is not a constant matrix")
    return np.ascontiguousarray(weight.T)


def _same(a: Any, b: Any) -> bool:
    """Provably equal dims: the same number, or the same symbolic name."""
    return a is not None and a != "" and a == b


CHECKS: dict[str, Callable[[Match], str | None]] = {"flattened_linear": flattened_linear}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {"gemm_bias_vector": gemm_bias_vector,
                                                     "gemm_weight_kn": gemm_weight_kn}
