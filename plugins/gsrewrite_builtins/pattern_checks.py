"""Named checks used by the built-in pattern files: ``check(match) -> reason | None``.

A check reads the match (never edits the graph) and returns a short reason when the match must be
rejected; ``--explain`` shows that reason.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import Match, reads


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


@reads("bn")
def inference_batchnorm(match: Match) -> str | None:
    """The BatchNormalization runs in inference mode and its statistics are constants."""
    node = match.node("bn")
    if node is not None and int(node.attrs.get("training_mode", 0)) != 0:
        return "BatchNormalization runs in training mode"
    return None


@reads("a", "b", "bias")
def gemm_compatible(match: Match) -> str | None:
    """MatMul + Add is a valid Gemm: 2-D A, constant 2-D B, bias broadcastable to [M, N] along rows. Shapes only:
    the weights' values are never read (a lazily loaded 768x768 weight per candidate cost simplify 30 ms)."""
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


@reads("a", "b", "gamma")
def skip_operands(match: Match) -> str | None:
    """SkipLayerNormalization needs two 3-D operands of the same shape and a 1-D gamma."""
    a, b = match.shape("a"), match.shape("b")
    if a is None or b is None:
        return "the shapes of the residual operands are unknown"
    if len(a) != 3 or a != b:
        return f"the residual operands have shapes {a} and {b}, not the same 3-D shape"
    gamma = match.constant("gamma")
    if gamma is None or gamma.ndim != 1:
        return "gamma is not a 1-D constant"
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
    "inference_batchnorm": inference_batchnorm,
    "gemm_compatible": gemm_compatible,
    "skip_operands": skip_operands,
    "last_axis_bias": last_axis_bias,
    "channel_bias": channel_bias,
}
