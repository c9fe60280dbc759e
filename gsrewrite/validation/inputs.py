"""Random inputs generated from a model's input signature, reproducible from a seed.

Per run ``r`` the generator is ``numpy.random.default_rng(seed + r)`` and inputs are drawn in the model's
input order:

* floats: standard normal N(0, 1), cast to the input dtype;
* integers that reach a ``Gather``'s indices (see :mod:`gsrewrite.validation.index_bounds`): uniform in
  ``[0, rows)`` of the gathered table;
* other integers (token types, flags): uniform in ``[0, 2)``;
* 2-D integer or bool inputs named like a mask (``attention_mask``): 0/1 rows of four kinds, cycling over the
  rows of every set drawn (``mask_offset`` continues the cycle across runs and size sets): padding on the
  right, padding on the left (from position 0, as batched generation pads: with a causal mask the first
  queries then see no key, and a fused kernel must treat them as the original does), no padding, and random
  holes. Never a fully masked row: one with no visible key has no defined attention;
* other bools: True or False with probability 1/2.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.random  # numpy loads it on first attribute use: load it with this module instead
import onnx

from gsrewrite.errors import InputDataError
from gsrewrite.validation.index_bounds import gather_index_bounds
from gsrewrite.validation.shapes import OTHER_DEFAULT, ShapeSpec, resolve_shapes
from gsrewrite.validation.signature import InputSpec
from gsrewrite.validation.text import draw_text
from gsrewrite.validation.value_hints import compared_values, is_position

#: Exclusive upper bound of integer inputs that do not index a table.
DEFAULT_INT_HIGH = 2
#: Inputs of at most this many elements may take the values the graph compares them with (a flag, a rate).
MAX_CHOICE_ELEMENTS = 16
#: The kinds of mask rows, drawn in turn.
MASK_KINDS = ("right padding", "left padding", "no padding", "holes")


@dataclass(frozen=True)
class InputPlan:
    """How to draw one input: its shape, dtype, and for integers the half-open range ``[low, high)``."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    low: int | None = None
    high: int | None = None
    #: an attention mask: every row keeps its first position (see the module doc)
    mask: bool = False
    #: token positions: ``start, start + 1, ...`` along the last axis, on every row
    start: int | None = None
    #: values the graph compares this input with: the input is filled with ``choices[choice]``
    choices: tuple[float, ...] = ()
    choice: int = 0
    #: token ids of real text (:mod:`gsrewrite.validation.text`) to draw rows of, instead of uniform ids
    text: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        last = None if self.start is None or not self.shape else self.start + self.shape[-1] - 1
        if last is not None and self.dtype.kind in "iu" and last > np.iinfo(self.dtype).max:
            raise InputDataError(f"input {self.name!r} ({self.dtype}) cannot hold the positions {self.start}..{last} "
                                 f"these sizes need (at most {np.iinfo(self.dtype).max}): give a shorter past or "
                                 "fewer new tokens")

    def draw(self, rng: np.random.Generator, mask_offset: int = 0) -> np.ndarray:
        """One random array following the plan (``mask_offset``: the kind of a mask's first row)."""
        kind = self.dtype.kind
        if self.choices:
            return np.full(self.shape, self.choices[self.choice % len(self.choices)], dtype=self.dtype)
        if self.start is not None and self.shape:
            positions = np.arange(self.start, self.start + self.shape[-1], dtype=self.dtype)
            return np.ascontiguousarray(np.broadcast_to(positions, self.shape))
        if self.mask and len(self.shape) == 2:
            return draw_mask(rng, self.shape, self.dtype, mask_offset)
        if kind == "b":  # np.asarray: a rank-0 draw is a numpy scalar, which onnxruntime refuses
            return np.asarray(rng.random(self.shape) < 0.5)
        if kind in "iu" and self.text is not None:
            return draw_text(rng, self.text, self.shape, self.high or DEFAULT_INT_HIGH, self.dtype)
        if kind in "iu":
            return np.asarray(rng.integers(self.low or 0, self.high or DEFAULT_INT_HIGH, size=self.shape,
                                           dtype=self.dtype))
        return np.asarray(rng.standard_normal(self.shape), dtype=self.dtype)

    def describe(self) -> dict[str, Any]:
        """Shape, dtype, source and value range, for the report."""
        if self.choices:
            value = self.choices[self.choice % len(self.choices)]
            among = ", ".join(f"{v:g}" for v in self.choices)
            values = f"{value:g}, of the values the graph compares it with ({among})"
        elif self.start is not None:
            values = f"positions {self.start}, {self.start + 1}, ... on every row"
        elif self.mask:
            values = "0/1 mask rows: " + ", ".join(MASK_KINDS) + " in turn (never fully masked)"
        elif self.dtype.kind in "iu" and self.text is not None:
            values = "token ids of real text (--tokenizer), a window per row"
        elif self.dtype.kind in "iu":
            values = f"uniform integers in [{self.low}, {self.high})"
        elif self.dtype.kind == "b":
            values = "random bools"
        else:
            values = "normal(0, 1)"
        return {"shape": list(self.shape), "dtype": str(self.dtype), "source": "generated", "values": values}


def plan_inputs(
    model: onnx.ModelProto, specs: Sequence[InputSpec], input_shapes: ShapeSpec | None = None,
    other_size: int = OTHER_DEFAULT, positions_start: int = 0,
) -> list[InputPlan]:
    """Decide shape and value range of every input (raises before anything runs when it cannot);
    ``other_size``: the size of dynamic dims that are not batch-like; ``positions_start``: the first position
    of position inputs (a decoder's past length)."""
    shapes = resolve_shapes(specs, input_shapes, other_size)
    int_names = [s.name for s in specs if s.dtype.kind in "iu"]
    bounds = gather_index_bounds(model.graph, int_names)
    small = [s.name for s in specs if s.dtype.kind in "biuf" and math.prod(shapes[s.name]) <= MAX_CHOICE_ELEMENTS]
    compared = compared_values(model.graph, small) if small else {}
    plans = []
    for spec in specs:
        dtype = spec.dtype
        if dtype.kind not in "biuf":
            raise InputDataError(
                f"cannot generate values for input {spec.name!r} of type {spec.type_name}; pass --inputs"
            )
        if spec.name in compared:
            plans.append(InputPlan(spec.name, shapes[spec.name], dtype, choices=tuple(compared[spec.name])))
        elif dtype.kind in "iu" and is_position(spec.name) and shapes[spec.name]:
            plans.append(InputPlan(spec.name, shapes[spec.name], dtype, start=positions_start))
        elif dtype.kind in "iu":
            high = min(bounds.get(spec.name, DEFAULT_INT_HIGH), int(np.iinfo(dtype).max) + 1)
            is_mask = spec.name not in bounds and _is_mask(spec.name, shapes[spec.name])
            plans.append(InputPlan(spec.name, shapes[spec.name], dtype, 0, high, mask=is_mask))
        else:
            is_mask = dtype.kind == "b" and _is_mask(spec.name, shapes[spec.name])
            plans.append(InputPlan(spec.name, shapes[spec.name], dtype, mask=is_mask))
    return plans


def generate_inputs(plans: Sequence[InputPlan], seed: int | Sequence[int], mask_offset: int = 0
                    ) -> dict[str, np.ndarray]:
    """One input set: every plan drawn in order from ``default_rng(seed)``; masks start their cycle of row kinds
    at ``mask_offset``."""
    rng = np.random.default_rng(seed)
    return {plan.name: plan.draw(rng, mask_offset) for plan in plans}


def _is_mask(name: str, shape: tuple[int, ...]) -> bool:
    return "mask" in name.lower() and len(shape) == 2


def draw_mask(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, offset: int = 0) -> np.ndarray:
    """0/1 rows of the kinds :data:`MASK_KINDS` in turn, row ``r`` of kind ``(offset + r) % 4``; every row keeps
    at least one 1 (rows of one position stay 1)."""
    values = np.ones(shape, dtype=dtype)
    rows, length = shape
    for row in range(rows if length > 1 else 0):
        kind = MASK_KINDS[(offset + row) % len(MASK_KINDS)]
        if kind == "right padding":
            values[row, int(rng.integers(1, length)):] = 0
        elif kind == "left padding":
            values[row, :int(rng.integers(1, length))] = 0
        elif kind == "holes":
            holes = rng.random(length) < 0.5
            holes[0] = False
            values[row, holes] = 0
    return values



def with_text(plans: Sequence[InputPlan], tokens: np.ndarray | None) -> list[InputPlan]:
    """``plans`` with the token-id inputs (integers indexing a table of more than a few rows: not masks, positions
    or flags) drawn from ``tokens`` (real text); unchanged without tokens."""
    if tokens is None:
        return list(plans)
    return [dataclasses.replace(p, text=tokens) if p.dtype.kind in "iu" and not p.mask and p.start is None
            and not p.choices and (p.high or 0) > DEFAULT_INT_HIGH else p for p in plans]
