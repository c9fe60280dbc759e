"""Named check and computations of the rotary pattern: the rotate-half split and the cos/sin caches.

The graph holds cos/sin as tables broadcast over [batch, heads, sequence, head_size] with both halves equal
(the rotate-half convention); onnxruntime's RotaryEmbedding takes half-width caches [sequence, head_size/2]
and the start position (0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gsrewrite.engine.match import CheckFailed, Match


def rotate_half(match: Match) -> str | None:
    """The two Slices take the second and the first half of the last axis; cos/sin tables fit."""
    shape = match.shape("x")
    if shape is None or len(shape) != 4 or not isinstance(shape[3], int) or not isinstance(shape[2], int):
        return f"x has shape {shape}, not [batch, heads, sequence, head_size] with static sequence and head size"
    half = shape[3] // 2
    first, second = _slice(match, "1", shape[3]), _slice(match, "2", shape[3])
    if first != (0, half) or second != (half, shape[3]):
        return f"the slices take {first} and {second} of the last axis, not the two halves"
    for name in ("cos", "sin"):
        table = _table(match, name)
        if table is None:
            return f"{name} is not a [sequence, head_size] table with equal halves"
    return None


def rotary_cos_cache(match: Match) -> np.ndarray:
    return _half_table(match, "cos")


def rotary_sin_cache(match: Match) -> np.ndarray:
    return _half_table(match, "sin")


def rotary_num_heads(match: Match) -> int:
    return int(match.shape("x")[1])


def _slice(match: Match, which: str, size: int) -> tuple[int, int] | None:
    values = [match.constant(f"{key}{which}") for key in ("s", "e", "a")]
    if any(v is None or v.size != 1 for v in values):
        return None
    steps = match.constant(f"st{which}")
    if steps is not None and (steps.size != 1 or int(steps.reshape(-1)[0]) != 1):
        return None
    start, end, axis = (int(v.reshape(-1)[0]) for v in values)
    if axis not in (-1, 3):
        return None
    clamp = lambda i: max(0, min(size, i + size if i < 0 else i))  # noqa: E731
    return clamp(start), clamp(end)


def _table(match: Match, name: str) -> np.ndarray | None:
    """The [sequence, head_size] table behind a cos/sin constant broadcast over batch and heads."""
    value = match.constant(name)
    shape = match.shape("x")
    if value is None or value.ndim < 2 or any(d != 1 for d in value.shape[:-2]):
        return None
    table = value.reshape(value.shape[-2:])
    half = table.shape[1] // 2
    if table.shape != (shape[2], shape[3]) or not np.array_equal(table[:, :half], table[:, half:]):
        return None
    return table


def _half_table(match: Match, name: str) -> np.ndarray:
    table = _table(match, name)
    if table is None:
        raise CheckFailed(f"{name} is not a rotary table")
    return np.ascontiguousarray(table[:, : table.shape[1] // 2])


CHECKS: dict[str, Callable[[Match], str | None]] = {"rotate_half": rotate_half}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {
    "rotary_cos_cache": rotary_cos_cache,
    "rotary_sin_cache": rotary_sin_cache,
    "rotary_num_heads": rotary_num_heads,
}
