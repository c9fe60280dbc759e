"""conv-add: a per-channel constant Add after a Conv folded into the Conv's bias."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gsrewrite.plugin_api import CheckFailed, Match, reads


@reads("bias", "w")
def channel_bias(match: Match) -> str | None:
    """An Add after Conv that only adds one value per output channel (shape [C, 1, ...] or [1, C, 1, ...])."""
    bias, weight = match.constant("bias"), match.constant("w")
    if bias is None or weight is None:
        return "the weight and the bias must be constants"
    channels = weight.shape[0]
    dims = list(bias.shape)
    spatial = weight.ndim - 2
    if len(dims) == spatial + 2 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) != spatial + 1 or dims[0] != channels or any(d != 1 for d in dims[1:]):
        return f"bias shape {list(bias.shape)} is not one value per output channel ({channels})"
    return None


@reads("bias", "w")
def channel_bias_vector(match: Match) -> np.ndarray:
    """The per-channel Add constant as Conv's 1-D bias, in the weight's dtype."""
    bias, weight = match.constant("bias"), match.constant("w")
    if bias is None or weight is None:
        raise CheckFailed("the weight and the bias must be constants")
    return bias.reshape(-1).astype(weight.dtype)


CHECKS: dict[str, Callable[[Match], str | None]] = {
    "channel_bias": channel_bias,
}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {
    "channel_bias_vector": channel_bias_vector,
}
