"""Named checks and computations that several pattern families use (registered once, by name).

``trailing_axes``, ``norm_parameters``, ``first_axis`` and ``norm_weight`` serve ``layernorm`` and ``rmsnorm``;
``last_axis_bias`` serves ``bias-gelu`` and ``skip-layernorm``. A check reads the match (never edits the graph)
and returns a short reason when the match must be rejected (``--explain`` shows it); a computation derives a
value the replacement needs and may reject the match by raising :class:`CheckFailed`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gsrewrite.plugin_api import CheckFailed, Match, reads


@reads("axes")
def trailing_axes(match: Match) -> str | None:
    """The captured reduction ``axes`` are the trailing axes of ``x`` (what LayerNormalization normalizes)."""
    axes = _negative_axes(match, "axes", "x")
    if isinstance(axes, str):
        return axes
    if sorted(axes) != list(range(-len(axes), 0)):
        return f"reduces over axes {list(axes)}, not the trailing ones"
    return None


@reads("axes", "scale", "x", optional=("bias",))
def norm_parameters(match: Match) -> str | None:
    """``scale`` and ``bias`` (when present) have the normalized shape, at most with leading 1s."""
    axes = _negative_axes(match, "axes", "x")
    if isinstance(axes, str):
        return axes
    shape = match.shape("x")
    trailing = shape[len(shape) - len(axes):] if shape is not None else None
    for name in ("scale", "bias"):
        value = match.constant(name)
        if value is None:
            continue
        dims = list(value.shape)
        while len(dims) > len(axes) and dims[0] == 1:
            dims.pop(0)
        if len(dims) > len(axes) or (trailing is not None and all(isinstance(d, int) for d in trailing)
                                     and dims != list(trailing)):
            return f"{name} has shape {list(value.shape)}, not the normalized shape {trailing}"
    return None


@reads("bias", "x")
def last_axis_bias(match: Match) -> str | None:
    """The bias is a 1-D constant along the last axis of x (what BiasGelu / FastGelu add)."""
    bias = match.constant("bias")
    shape = match.shape("x")
    if bias is None or bias.squeeze().ndim != 1 or bias.ndim > 1:
        return f"the bias has shape {list(bias.shape) if bias is not None else None}, not [hidden]"
    if shape is not None and isinstance(shape[-1], int) and shape[-1] != bias.shape[0]:
        return f"the bias has {bias.shape[0]} values for a last axis of {shape[-1]}"
    return None


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


def _negative_axes(match: Match, capture: str, tensor: str) -> list[int] | str:
    axes = [int(a) for a in np.asarray(match.value(capture)).reshape(-1)]
    if all(a < 0 for a in axes):
        return axes
    shape = match.shape(tensor)
    if shape is None:
        return f"axes {axes} are not negative and the rank of {tensor} is unknown"
    return [a - len(shape) if a >= 0 else a for a in axes]


CHECKS: dict[str, Callable[[Match], str | None]] = {
    "trailing_axes": trailing_axes,
    "norm_parameters": norm_parameters,
    "last_axis_bias": last_axis_bias,
}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {
    "first_axis": first_axis,
    "norm_weight": norm_weight,
}
