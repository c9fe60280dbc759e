"""conv-affine: a per-channel constant ``k`` multiplied into or added to a Conv's (or a ConvTranspose's) output.

``Mul(Conv(x, W, B), k)`` is ``Conv(x, W * k_c, B * k_c)`` and ``Add(Conv(x, W, B), k)`` is ``Conv(x, W, B + k_c)``
when ``k`` broadcasts along the output-channel axis only (a scalar, or ones on every other axis) and has the
weight's float type. A ConvTranspose weight is [C_in, C_out / group, ...]: scaled along axis 1, for group 1
only. Equal to the original up to float rounding (one product per weight instead of per output element).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gsrewrite.plugin_api import CheckFailed, Match, reads


@reads("conv", "k", "w")
def channel_constant(match: Match) -> str | None:
    """``k`` holds one value per output channel, of the weight's float type; a ConvTranspose has group 1. Shapes
    and types only: the weight's values are not read (a lazily loaded weight per candidate is not free)."""
    found = _per_channel(match)
    return found if isinstance(found, str) else None


@reads("b", "conv", "k", "w")
def channel_add_bias(match: Match) -> np.ndarray:
    """The Conv's bias (zeros without one) plus ``k``'s value per channel."""
    per_channel = _required(match)
    return (_bias(match, per_channel) + per_channel).astype(per_channel.dtype)


@reads("conv", "k", "w")
def channel_mul_weight(match: Match) -> np.ndarray:
    """The weight scaled along its output-channel axis by ``k``."""
    per_channel, weight = _required(match), match.constant("w")
    assert weight is not None  # a constant of the template
    shape = [1] * weight.ndim
    shape[_channel_axis(match)] = per_channel.size
    return (weight * per_channel.reshape(shape)).astype(per_channel.dtype)


@reads("b", "conv", "k", "w")
def channel_mul_bias(match: Match) -> np.ndarray:
    """The Conv's bias (zeros without one) times ``k``'s value per channel."""
    per_channel = _required(match)
    return (_bias(match, per_channel) * per_channel).astype(per_channel.dtype)


def _per_channel(match: Match) -> np.ndarray | str:
    """``k`` as one value per output channel in the weight's dtype, or why it is not that."""
    value, weight, dtype, conv = match.constant("k"), match.shape("w"), match.dtype("w"), match.node("conv")
    if value is None or weight is None or dtype is None or conv is None:
        return "the weight and the constant must be constants"
    if conv.op == "ConvTranspose" and int(conv.attrs.get("group", 1)) != 1:
        return "a grouped ConvTranspose: its weight's channel axis is per group"
    if dtype.kind != "f" or value.dtype != dtype:
        return f"the constant is {value.dtype} and the weight {dtype}: not one float type"
    channels, rank = weight[_channel_axis(match)], len(weight)  # the output has the weight's rank
    shape = (1,) * (rank - value.ndim) + tuple(value.shape)
    if value.ndim > rank or any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return f"shape {list(value.shape)} is not one value per output channel ({channels})"
    return np.broadcast_to(value.reshape(-1), (int(channels),)).astype(dtype)


def _required(match: Match) -> np.ndarray:
    found = _per_channel(match)
    if isinstance(found, str):
        raise CheckFailed(found)
    return found


def _channel_axis(match: Match) -> int:
    conv = match.node("conv")
    return 1 if conv is not None and conv.op == "ConvTranspose" else 0


def _bias(match: Match, per_channel: np.ndarray) -> np.ndarray:
    bias = match.constant("b")
    return bias if bias is not None else np.zeros(per_channel.shape, per_channel.dtype)


CHECKS: dict[str, Callable[[Match], str | None]] = {"channel_constant": channel_constant}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {
    "channel_add_bias": channel_add_bias,
    "channel_mul_weight": channel_mul_weight,
    "channel_mul_bias": channel_mul_bias,
}
