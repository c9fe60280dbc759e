"""Named computations used by the built-in pattern files: ``compute(match) -> value``.

A computation derives a value the replacement needs (an attribute, or a new constant such as folded
weights); it may reject the match by raising :class:`gsrewrite.engine.CheckFailed`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gsrewrite.plugin_api import CheckFailed, Match, reads


@reads("axes", "x")
def first_axis(match: Match) -> int:
    """The first normalized axis (negative) of the captured ``axes``: LayerNormalization's ``axis``."""
    axes = [int(a) for a in np.asarray(match.value("axes")).reshape(-1)]
    shape = match.shape("x")
    rank = len(shape) if shape is not None else 0
    return min(a - rank if a >= 0 else a for a in axes)


@reads("axes", "scale", "x")
def norm_weight(match: Match) -> np.ndarray:
    """The norm's scale: the matched constant, or ones over the normalized (static) axes when the scale was a
    no-op that simplify removed (a model whose norm weights are all ones)."""
    scale = match.constant("scale")
    if scale is not None:
        return scale
    shape = match.shape("x")
    rank = len(shape) if shape is not None else 0
    axes = [int(a) for a in np.asarray(match.value("axes")).reshape(-1)]
    trailing = shape[min(a if a >= 0 else a + rank for a in axes):] if shape is not None and axes else None
    if trailing is None or not all(isinstance(d, int) for d in trailing):
        raise CheckFailed(f"no scale, and the normalized shape {trailing} is not static: cannot make a unit scale")
    dtype = match.dtype("x")
    return np.ones(trailing, dtype=dtype if dtype is not None and dtype.kind == "f" else np.float32)


def _bn_scale(match: Match) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel factor ``gamma / sqrt(var + eps)`` and the conv weight, both as float64."""
    weight = match.constant("w")
    gamma, var = match.constant("scale"), match.constant("var")
    if weight is None or gamma is None or var is None:
        raise CheckFailed("the Conv weight and BatchNormalization statistics must be constants")
    eps = float(match.value("eps"))
    factor = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    if factor.shape != (weight.shape[0],):
        raise CheckFailed(f"{factor.shape[0]} BatchNormalization channels for {weight.shape[0]} Conv outputs")
    return factor, weight


@reads("eps", "scale", "var", "w")
def bn_fold_weight(match: Match) -> np.ndarray:
    """Conv weight scaled per output channel by the BatchNormalization factor."""
    factor, weight = _bn_scale(match)
    # computed in float64 without a float64 copy of the weight (the same values, 3-4x faster)
    folded = np.multiply(weight, factor.reshape((-1,) + (1,) * (weight.ndim - 1)), dtype=np.float64)
    return folded.astype(weight.dtype)


@reads("b", "eps", "mean", "scale", "shift", "var", "w")
def bn_fold_bias(match: Match) -> np.ndarray:
    """Conv bias after BatchNormalization: ``(b - mean) * factor + beta``."""
    factor, weight = _bn_scale(match)
    mean, beta = match.constant("mean"), match.constant("shift")
    if mean is None or beta is None:
        raise CheckFailed("BatchNormalization mean and bias must be constants")
    bias = match.constant("b")
    base = bias.astype(np.float64) if bias is not None else np.zeros(weight.shape[0])
    return ((base - mean.astype(np.float64)) * factor + beta.astype(np.float64)).astype(weight.dtype)


@reads("bias", "w")
def channel_bias_vector(match: Match) -> np.ndarray:
    """The per-channel Add constant as Conv's 1-D bias, in the weight's dtype."""
    bias, weight = match.constant("bias"), match.constant("w")
    if bias is None or weight is None:
        raise CheckFailed("the weight and the bias must be constants")
    return bias.reshape(-1).astype(weight.dtype)


COMPUTATIONS: dict[str, Callable[[Match], Any]] = {
    "first_axis": first_axis,
    "norm_weight": norm_weight,
    "bn_fold_weight": bn_fold_weight,
    "bn_fold_bias": bn_fold_bias,
    "channel_bias_vector": channel_bias_vector,
}
