"""Named check and computations of the rotary pattern: the rotate-half split and the cos/sin caches.

The graph holds cos/sin as tables broadcast over [batch, heads, sequence, head_size] with both halves equal
(the rotate-half convention); onnxruntime's RotaryEmbedding takes half-width caches [sequence, head_size/2]
and the start position (0).

Exports with a dynamic sequence compute the tables at run time (``cos(cat(freqs, freqs))`` of the positions).
``rotary-dynamic`` keeps that computation and hands RotaryEmbedding the first half of each table row by
row: row i of the table is what the model applies at position i, which is what the op reads for position
0 + i. :func:`rotate_half_dynamic` proves the halves equal by running the table's computation
(:mod:`gsrewrite_patterns._shared.producers`) at every length :mod:`gsrewrite_patterns._shared.sizes`
chooses (a table that differs only past some position is seen there, the position computed or not).

Both keep the table's computation, so a switch of frequencies with the length or the positions (LongRoPE's
short/long factors, dynamic NTK's base past the trained length) stays the model's own: only the equal halves
are claimed. ``rotary-positions`` proves them by construction (``g(cat(f, f))``, whatever ``f`` is), so a
switch inside ``f`` is kept as it is; one after the concatenation (a ``Where`` or ``If`` choosing between
tables) is refused, like any op that may mix the halves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gsrewrite.plugin_api import CheckFailed, Match, constant_values, reads

from .._shared.producers import NotProven
from .._shared.sizes import values_by_length


@reads("a1", "a2", "cos", "e1", "e2", "s1", "s2", "sin", "st1", "st2", "x")
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


@reads("cos", "x")
def rotary_cos_cache(match: Match) -> np.ndarray:
    return _half_table(match, "cos")


@reads("sin", "x")
def rotary_sin_cache(match: Match) -> np.ndarray:
    return _half_table(match, "sin")


@reads("x")
def rotary_num_heads(match: Match) -> int:
    """x's head count; 0 (RotaryEmbedding then reads it from the 4-D input) when the shape does not say."""
    heads = match.shape("x")[1]
    return int(heads) if isinstance(heads, int) else 0


def _slice(match: Match, which: str, size: int) -> tuple[int, int] | None:
    values = [_static_value(match, f"{key}{which}") for key in ("s", "e", "a")]
    if any(v is None or v.size != 1 for v in values):
        return None
    steps = _static_value(match, f"st{which}") if match.tensor(f"st{which}") is not None else None
    if match.tensor(f"st{which}") is not None and (steps is None or steps.size != 1
                                                    or int(steps.reshape(-1)[0]) != 1):
        return None
    start, end, axis = (int(v.reshape(-1)[0]) for v in values if v is not None)
    if axis not in (-1, 3):
        return None
    clamp = lambda i: max(0, min(size, i + size if i < 0 else i))  # noqa: E731
    return clamp(start), clamp(end)


def _static_value(match: Match, name: str) -> np.ndarray | None:
    """A constant's value; for a computed tensor (a slice bound from ``Shape(x)[-1] / 2``), its value when it
    depends only on shapes and comes out the same at every proof length (else None)."""
    value = match.constant(name)
    tensor = match.tensor(name)
    if value is not None or tensor is None:
        return value
    try:
        results = [v for _, v in values_by_length(match.graph, match.opset, tensor, f"'{name}'",
                                                  match.shape("x") or [None] * 4, 2)]
    except NotProven:
        return None
    if any(r.shape != results[0].shape or np.any(r != results[0]) for r in results):
        return None
    return results[0]


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


def _rotate_half_slices(match: Match, shape: list[Any] | None) -> int | str:
    """x's head size when x [batch, heads, sequence, head_size] (static head size) is cut into its two halves,
    else why not."""
    if shape is None or len(shape) != 4 or not isinstance(shape[3], int):
        return f"x has shape {shape}, not [batch, heads, sequence, head_size] with a static head size"
    size = shape[3]
    first, second = _slice(match, "1", size), _slice(match, "2", size)
    if size % 2 or first != (0, size // 2) or second != (size // 2, size):
        return f"the slices take {first} and {second} of the last axis, not the two halves"
    return size


@reads("a1", "a2", "cos", "e1", "e2", "s1", "s2", "sin", "st1", "st2", "x")
def rotate_half_dynamic(match: Match) -> str | None:
    """Rotate-half slices of x [batch, heads, sequence, head_size] (static head size); cos/sin are
    run-time tables [1, .., sequence, head_size] whose halves are equal (proven by running them)."""
    shape = match.shape("x")
    size = _rotate_half_slices(match, shape)
    if isinstance(size, str):
        return size
    assert shape is not None
    for name in ("cos", "sin"):
        table = match.shape(name)
        if table is None or len(table) < 2 or any(d != 1 for d in table[:-2]) or table[-1] != size \
                or (isinstance(table[-2], int) and isinstance(shape[2], int) and table[-2] != shape[2]):
            return f"{name} has shape {table}, not [1, .., sequence, {size}]"
        try:
            _prove_equal_halves(match, name)
        except NotProven as exc:
            return str(exc)
    return None


def _prove_equal_halves(match: Match, name: str) -> None:
    import onnx_graphsurgeon as gs

    tensor = match.tensor(name)
    assert tensor is not None
    if isinstance(tensor, gs.Constant):  # a constant table (one the rotary pattern did not take)
        value = constant_values(tensor)
        half = value.shape[-1] // 2
        if not np.array_equal(value[..., :half], value[..., half:]):
            raise NotProven(f"the {name} table does not have equal halves")
        return
    for length, value in values_by_length(match.graph, match.opset, tensor, f"the {name} table",
                                          match.shape("x") or [None] * 4, 2, value_axis=-2):
        half = value.shape[-1] // 2 if value.ndim else 0
        if value.ndim < 2 or value.shape[-2] != length or not np.array_equal(value[..., :half], value[..., half:]):
            raise NotProven(f"the {name} table (shape {list(value.shape)} for {length} positions) does not "
                            "have one row per position with equal halves")


@reads("a1", "a2", "cos", "e1", "e2", "s1", "s2", "sin", "st1", "st2", "x")
def rotate_half_positions(match: Match) -> str | None:
    """Rotate-half slices of x [batch, heads, sequence, head_size] (static head size); cos/sin are run-time
    tables with one row per token, [batch or 1, 1, sequence, head_size] (computed from position ids), whose
    halves are equal by construction: ``cos(cat(f, f))`` through casts, constant scales and unsqueezes."""
    shape = match.shape("x")
    size = _rotate_half_slices(match, shape)
    if isinstance(size, str):
        return size
    assert shape is not None
    for name in ("cos", "sin"):
        table = match.shape(name)
        if table is None or len(table) != 4 or table[1] != 1 or table[3] != size or table[0] not in (1, shape[0]) \
                or table[2] != shape[2]:
            return f"{name} has shape {table}, not [batch or 1, 1, sequence, {size}] (one row per token)"
        reason = _halves_by_construction(match.tensor(name))
        if reason is not None:
            return f"{name}: {reason}"
    return None


@reads("cos", "sin", "x")
def tables_of_x_batch(match: Match) -> str | None:
    """The per-token tables have x's own batch (the same dim, not a broadcast 1): the ids made from a table's
    [batch, sequence] then index x's tokens without being expanded to x's shape."""
    shape = match.shape("x")
    for name in ("cos", "sin"):
        table = match.shape(name)
        if shape is None or table is None or len(table) != 4 or table[0] is None or table[0] != shape[0]:
            return f"{name} has shape {table}: its batch is not x's {shape and shape[0]} (broadcast ids)"
    return None


#: ops through which both halves of the last axis stay equal (elementwise, or moving other axes)
_HALF_KEEPING = frozenset({"Cos", "Sin", "Cast", "Identity", "Unsqueeze"})


def _halves_by_construction(tensor: Any) -> str | None:
    """None when ``tensor`` is ``g(cat(f, f, axis=-1))`` for elementwise ``g`` (cos, sin, casts, scaling by one
    constant value, unsqueezes that keep the last axis last)."""
    import onnx_graphsurgeon as gs

    for _ in range(12):
        node = tensor.inputs[0] if tensor is not None and tensor.inputs else None
        if node is None:
            return "not computed by cos/sin of a concatenation of two equal halves"
        if node.op == "Concat":
            parts = node.inputs
            axis = node.attrs.get("axis")
            if len(parts) == 2 and parts[0] is parts[1] and axis == -1:
                return None
            return "its halves are not one tensor concatenated with itself on the last axis"
        if node.op in ("Mul", "Div"):
            constants = [t for t in node.inputs if isinstance(t, gs.Constant)]
            variables = [t for t in node.inputs if not isinstance(t, gs.Constant)]
            if len(constants) != 1 or len(variables) != 1 or np.unique(constant_values(constants[0])).size != 1 \
                    or (node.op == "Div" and node.inputs[0] is not variables[0]):
                return f"{node.op} by something other than one constant value"
            tensor = variables[0]
            continue
        if node.op not in _HALF_KEEPING:
            return f"computed by {node.op}, which may mix the two halves"
        if node.op == "Unsqueeze" and -1 in list(node.attrs.get("axes") or []):
            return "an Unsqueeze adds the last axis"
        tensor = node.inputs[0]
    return "computed by a longer chain than a rotary table"


@reads("x")
def rotary_flat_table(match: Match) -> np.ndarray:
    """The Reshape target that turns a [1, .., sequence, head_size] table into [sequence, head_size]."""
    return np.array([-1, int(match.shape("x")[3])], dtype=np.int64)


@reads("x")
def rotary_half_width(match: Match) -> np.ndarray:
    """head_size / 2, the end of the Slice that keeps a table's first half."""
    return np.array([int(match.shape("x")[3]) // 2], dtype=np.int64)


CHECKS: dict[str, Callable[[Match], str | None]] = {
    "rotate_half": rotate_half, "rotate_half_dynamic": rotate_half_dynamic,
    "rotate_half_positions": rotate_half_positions, "tables_of_x_batch": tables_of_x_batch,
}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {
    "rotary_cos_cache": rotary_cos_cache,
    "rotary_sin_cache": rotary_sin_cache,
    "rotary_num_heads": rotary_num_heads,
    "rotary_flat_table": rotary_flat_table,
    "rotary_half_width": rotary_half_width,
}
