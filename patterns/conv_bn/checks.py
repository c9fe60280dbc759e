"""conv-bn: an inference BatchNormalization folded into the preceding Conv's weight and bias."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gsrewrite.plugin_api import CheckFailed, Match, reads


@reads("bn")
def inference_batchnorm(match: Match) -> str | None:
    """The BatchNormalization runs in inference mode and its statistics are constants."""
    node = match.node("bn")
    if node is not None and int(node.attrs.get("training_mode", 0)) != 0:
        return "BatchNormalization runs in training mode"
    return None


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
    # computed in float64 without a float64 copy of the weight (the same values, faster:
    # benchmarks/results/code_figures.md)
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


CHECKS: dict[str, Callable[[Match], str | None]] = {
    "inference_batchnorm": inference_batchnorm,
}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {
    "bn_fold_weight": bn_fold_weight,
    "bn_fold_bias": bn_fold_bias,
}
