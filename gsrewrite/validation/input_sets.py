"""The input sets of a validation, one per size set: shapes checked against the memory budget, then the feeds.

Everything here is decided from shapes before any array is allocated: :func:`fit_budget` drops the sets the
memory budget cannot hold (the largest first) and raises :class:`MemoryBudgetError` when even the first set is
over it. :func:`build_set` then makes the feeds: the user's arrays for a given sample, generated arrays
(:mod:`gsrewrite.validation.inputs`) otherwise.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from gsrewrite.errors import InputDataError
from gsrewrite.validation.dims import input_dims
from gsrewrite.validation.given_inputs import describe_given
from gsrewrite.validation.inputs import InputPlan, generate_inputs, plan_inputs
from gsrewrite.validation.memory import MemoryBudgetError, default_budget, estimate_peak, format_bytes, input_bytes
from gsrewrite.validation.shapes import ShapeSpec, resolve_shapes
from gsrewrite.validation.signature import InputSpec, model_inputs
from gsrewrite.validation.sizes import SizeSet

log = logging.getLogger(__name__)

@dataclass
class InputSet:
    """The inputs of one size set: :meth:`feed` gives the feed of a run; ``described`` is for the report.

    Run ``r`` of set 0 draws from ``default_rng(seed + r)`` (as before there were size sets), run ``r`` of set
    ``k > 0`` from ``default_rng([seed + r, k])``; mask rows start their cycle of kinds at ``mask_offset``.
    """

    size: SizeSet
    described: dict[str, dict[str, Any]]
    plans: list[InputPlan] = field(default_factory=list)
    given: Mapping[str, np.ndarray] | None = None
    seed: int = 0
    index: int = 0
    mask_offset: int = 0
    #: run -> the feed of that run made from the original's own prefill (a decoder's past,
    #: :mod:`gsrewrite.validation.prefill`): used instead of the drawn one
    prefilled: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def choices(self) -> int:
        """How many values the inputs the graph compares with constants can take (1 without such inputs)."""
        return max((len(plan.choices) for plan in self.plans), default=1) or 1

    def with_choice(self, choice: int) -> InputSet:
        """This set with the ``choice``-th of the values compared with (see :meth:`choices`)."""
        if self.choices == 1:
            return self
        plans = [dataclasses.replace(p, choice=choice) if p.choices else p for p in self.plans]
        return dataclasses.replace(self, plans=plans, described={p.name: p.describe() for p in plans})

    @property
    def mask_rows(self) -> int:
        """Rows of the generated masks in one run (0 without a mask)."""
        return max((plan.shape[0] for plan in self.plans if plan.mask), default=0)

    def feed(self, run: int) -> dict[str, np.ndarray]:
        """The feed of run ``run``."""
        if self.given is not None:
            return dict(self.given)
        if run in self.prefilled:
            return dict(self.prefilled[run])
        return generate_inputs(self.plans, self.seeds(run), self.mask_offset + run * self.mask_rows)

    def seeds(self, run: int) -> list[int]:
        """The seed of run ``run``'s draw (see the class docstring)."""
        return [self.seed + run] if self.index == 0 else [self.seed + run, self.index]


def fit_budget(model: onnx.ModelProto, specs: Sequence[InputSpec], sets: list[SizeSet], budget: int
               ) -> list[SizeSet]:
    """The sets whose estimated peak memory fits ``budget``, in order; the largest sets are dropped first.

    Sets are estimated from the largest down; a set no larger in any dim than one that fits is not estimated
    (shape inference is most of the cost). Raises :class:`MemoryBudgetError` when the first set does not fit.
    """
    itemsizes = {spec.name: _itemsize(spec) for spec in specs}
    fitting: list[SizeSet] = []
    dropped: set[str] = set()
    for size in sorted(sets, key=lambda s: -input_bytes(s.shapes, itemsizes)[0]):
        if any(_within(size, larger) for larger in fitting):
            fitting.append(size)
            continue
        total, largest = _estimate(model, size, itemsizes, budget)
        if total <= budget:
            fitting.append(size)
        elif size is sets[0]:
            raise MemoryBudgetError(
                f"validation needs about {format_bytes(total)} to run the original on {size.describe()}, over the "
                f"memory budget of {format_bytes(budget)} (largest tensor {largest[0]}: {format_bytes(largest[1])}); "
                "give smaller inputs with --input-shape, or skip validation with --no-validate"
            )
        else:
            dropped.add(size.name)
            log.warning("validation skips the %s input set: it needs about %s, over the memory budget of %s",
                        size.describe(), format_bytes(total), format_bytes(budget))
    return [size for size in sets if size.name not in dropped]


def _estimate(model: onnx.ModelProto, size: SizeSet, itemsizes: dict[str, int], budget: int
              ) -> tuple[int, tuple[str, int]]:
    """Estimated peak bytes of a set, and its largest tensor (name, bytes). Inputs over budget alone skip
    shape inference."""
    total, name, nbytes = input_bytes(size.shapes, itemsizes)
    if total <= budget:
        estimate = estimate_peak(model, size.shapes)
        total = max(total, estimate.peak)
        if estimate.largest_bytes > nbytes:
            name, nbytes = estimate.largest, estimate.largest_bytes
    return total, (name, nbytes)


def _within(size: SizeSet, larger: SizeSet) -> bool:
    """Every dim of every input of ``size`` is at most the same dim in ``larger``."""
    return all(len(shape) == len(larger.shapes.get(name, ())) and
               all(a <= b for a, b in zip(shape, larger.shapes[name], strict=True))
               for name, shape in size.shapes.items())


def build_set(model: onnx.ModelProto, specs: Sequence[InputSpec], size: SizeSet, index: int, seed: int,
              given: Mapping[str, np.ndarray] | None = None, like: InputSet | None = None) -> InputSet:
    """The feeds of ``size``: ``given`` arrays for the first set when the user gave them, else generated
    (raises :class:`InputDataError` when they cannot be). ``like``: a generated set whose plans (value ranges,
    masks) hold at this size too, so that the graph is not walked again."""
    if given is not None and index == 0:
        return InputSet(size, describe_given(given), given=given)
    if like is not None and like.plans:
        plans = [dataclasses.replace(plan, shape=size.shapes[plan.name],
                                     start=None if plan.start is None else size.positions_start)
                 for plan in like.plans]
    else:
        plans = plan_inputs(model, specs, size.shapes, positions_start=size.positions_start)
    for plan in plans:
        log.info("input %s (%s set): %s", plan.name, size.name, plan.describe())
    return InputSet(size, {p.name: p.describe() for p in plans}, plans, seed=seed, index=index)


def _itemsize(spec: InputSpec) -> int:
    try:
        return spec.dtype.itemsize or 8
    except Exception:  # an unsupported type: the generator will say so; count it as 8 bytes here
        return 8


def sample_size(model: onnx.ModelProto, specs: Sequence[InputSpec], input_shapes: ShapeSpec | None = None
                ) -> SizeSet:
    """Validation's sample size for one-shot inputs (bench, extract, calibration, shape checks): the dims as the
    graph relates them (:mod:`gsrewrite.validation.dims`, the likeliest variant first), checked against the
    memory budget before anything is allocated."""
    try:
        dims = input_dims(model, input_shapes, specs).variants()[0]
        bindings = dims.sample_bindings()
        size = SizeSet("sample", dims.shapes(bindings), bindings, dims.positions_start(bindings))
    except InputDataError:  # dims the relations cannot size (an input without a shape): the plain rules say why
        size = SizeSet("sample", resolve_shapes(specs, input_shapes))
    fit_budget(model, specs, [size], default_budget())
    return size


def generated_inputs(model: onnx.ModelProto, count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` input sets for ``model`` at validation's sample sizes, drawn as validation draws them (for
    plugins that need inputs: a quantizer's calibration)."""
    specs = model_inputs(model)
    size = sample_size(model, specs)
    plans = plan_inputs(model, specs, size.shapes, positions_start=size.positions_start)
    return [generate_inputs(plans, seed + i, mask_offset=i) for i in range(count)]
