"""Random inputs generated from a model's input signature, reproducible from a seed.

Per run ``r`` the generator is ``numpy.random.default_rng(seed + r)`` and inputs are drawn in the model's
input order:

* floats: standard normal N(0, 1), cast to the input dtype;
* integers that reach a ``Gather``'s indices (see :mod:`gsrewrite.validation.index_bounds`): uniform in
  ``[0, rows)`` of the gathered table;
* other integers (masks, token types, flags): uniform in ``[0, 2)``; in a 2-D integer input named like a
  mask (``attention_mask``), the first position of every row is 1: a row with no visible key (every score
  masked) has no defined attention, and kernels legitimately differ there (uniform weights, zeros, NaN);
* bools: True or False with probability 1/2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.random  # numpy loads it on first attribute use: load it with this module instead
import onnx

from gsrewrite.errors import InputDataError
from gsrewrite.validation.index_bounds import gather_index_bounds
from gsrewrite.validation.shapes import OTHER_DEFAULT, ShapeSpec, resolve_shapes
from gsrewrite.validation.signature import InputSpec

#: Exclusive upper bound of integer inputs that do not index a table.
DEFAULT_INT_HIGH = 2


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

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """One random array following the plan."""
        kind = self.dtype.kind
        if kind == "b":  # np.asarray: a rank-0 draw is a numpy scalar, which onnxruntime refuses
            return np.asarray(rng.random(self.shape) < 0.5)
        if kind in "iu":
            values = np.asarray(rng.integers(self.low or 0, self.high or DEFAULT_INT_HIGH, size=self.shape,
                                             dtype=self.dtype))
            if self.mask and values.ndim == 2 and values.shape[1] > 0:
                values[:, 0] = 1
            return values
        return np.asarray(rng.standard_normal(self.shape), dtype=self.dtype)

    def describe(self) -> dict[str, Any]:
        """Shape, dtype, source and value range, for the report."""
        if self.dtype.kind in "iu":
            values: str = f"uniform integers in [{self.low}, {self.high})"
            if self.mask:
                values += ", first position of every row 1"
        elif self.dtype.kind == "b":
            values = "random bools"
        else:
            values = "normal(0, 1)"
        return {"shape": list(self.shape), "dtype": str(self.dtype), "source": "generated", "values": values}


def plan_inputs(
    model: onnx.ModelProto, specs: Sequence[InputSpec], input_shapes: ShapeSpec | None = None,
    other_size: int = OTHER_DEFAULT,
) -> list[InputPlan]:
    """Decide shape and value range of every input (raises before anything runs when it cannot);
    ``other_size``: the size of dynamic dims that are not batch-like."""
    shapes = resolve_shapes(specs, input_shapes, other_size)
    int_names = [s.name for s in specs if s.dtype.kind in "iu"]
    bounds = gather_index_bounds(model.graph, int_names)
    plans = []
    for spec in specs:
        dtype = spec.dtype
        if dtype.kind not in "biuf":
            raise InputDataError(
                f"cannot generate values for input {spec.name!r} of type {spec.type_name}; pass --inputs"
            )
        if dtype.kind in "iu":
            high = min(bounds.get(spec.name, DEFAULT_INT_HIGH), int(np.iinfo(dtype).max) + 1)
            is_mask = spec.name not in bounds and "mask" in spec.name.lower() and len(shapes[spec.name]) == 2
            plans.append(InputPlan(spec.name, shapes[spec.name], dtype, 0, high, mask=is_mask))
        else:
            plans.append(InputPlan(spec.name, shapes[spec.name], dtype))
    return plans


def generate_inputs(plans: Sequence[InputPlan], seed: int) -> dict[str, np.ndarray]:
    """One input set: every plan drawn in order from ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return {plan.name: plan.draw(rng) for plan in plans}
