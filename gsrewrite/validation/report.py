"""What a validation found: one :class:`OutputComparison` per output (and run), gathered in a report."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gsrewrite.validation.criteria import (
    AGREEMENT,
    COSINE,
    ELEMENTS,
    MAX_ABS,
    NON_FINITE,
    TOP1,
    Criterion,
    percent,
)


@dataclass(frozen=True)
class OutputComparison:
    """How one output of the candidate compares with the original's, in one run or over all runs.

    ``max_abs``/``max_rel``/``cosine`` are taken over the elements that are finite in both models (``cosine``:
    float outputs only); they are ``None`` when nothing could be compared (missing output, shape mismatch,
    string output). ``nonfinite_mismatches`` counts the elements whose NaN/inf pattern differs from the
    original's (a non-finite value where the original's is finite, or the reverse, NaN against inf, the other
    infinity): those fail whatever the tolerances. ``mismatches`` counts the elements outside atol/rtol
    (see ``docs/validation.md`` for the rule), non-finite ones that differ included; for integer and bool
    outputs (``exact``), the elements that differ. ``top1_rows``/``top1_agree``: for class scores
    (``class_axis`` set), the rows compared and those whose top-1 class is the original's. ``failed`` names the
    metrics that fail the validation's criterion (:mod:`gsrewrite.validation.criteria`). ``problem`` is set when
    the output cannot agree whatever its values (missing in the candidate, different shape or dtype).
    """

    name: str
    run: int | None
    shape: tuple[int, ...]
    dtype: str
    candidate_shape: tuple[int, ...] | None = None
    candidate_dtype: str | None = None
    exact: bool = False
    elements: int = 0
    mismatches: int = 0
    max_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None
    nan_original: int = 0
    nan_candidate: int = 0
    inf_original: int = 0
    inf_candidate: int = 0
    problem: str | None = None
    #: the size set of this comparison (``sample``, ``small``, ``long``); ``None`` once folded
    size_set: str | None = None
    #: folded: the size sets in which the output disagreed
    failed_sets: tuple[str, ...] = ()
    nonfinite_mismatches: int = 0
    class_axis: int | None = None
    top1_rows: int = 0
    top1_agree: int = 0
    #: the metrics that fail the criterion: ``non-finite``, ``atol/rtol``, ``cosine``, ``max abs``,
    #: ``agreement``, ``top-1``
    failed: tuple[str, ...] = ()
    #: float outputs: the largest abs error among the elements outside rtol (an element-wise rule with any atol at
    #: or above it passes: what lets a comparison be judged again against the model's own noise)
    max_abs_outside_rtol: float | None = None
    #: how much the original's output itself moves on these inputs under onnxruntime's optimizer (max abs; for
    #: integer outputs the elements that change): set once the model's own noise was measured
    #: (:mod:`gsrewrite.validation.noise`), ``None`` before
    noise_max_abs: float | None = None
    noise_mismatches: int | None = None

    @property
    def ok(self) -> bool:
        """True when the candidate's output meets the validation's criterion."""
        return self.problem is None and not self.failed

    @property
    def agreement(self) -> float | None:
        """Integer, bool and string outputs: the share (0..1) of elements equal to the original's."""
        if not self.exact or not self.elements or self.problem is not None:
            return None
        return (self.elements - self.mismatches) / self.elements

    @property
    def top1(self) -> float | None:
        """Class scores: the share (0..1) of rows whose top-1 class is the original's."""
        return self.top1_agree / self.top1_rows if self.top1_rows else None

    @property
    def mismatch_fraction(self) -> float:
        """The fraction (0..1) of elements outside tolerance."""
        return self.mismatches / self.elements if self.elements else 0.0

    @property
    def verdict(self) -> str:
        """``ok``, ``mismatch``, or the problem (``missing in candidate``, ``shape ...``, ``dtype ...``)."""
        if self.problem is not None:
            return self.problem
        return "ok" if self.ok else "mismatch"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field plus ``ok``, ``verdict`` and ``mismatch_fraction``."""
        data = dataclasses.asdict(self)
        data["shape"] = list(self.shape)
        data["candidate_shape"] = None if self.candidate_shape is None else list(self.candidate_shape)
        data["failed_sets"] = list(self.failed_sets)
        data["failed"] = list(self.failed)
        data.update(ok=self.ok, verdict=self.verdict, mismatch_fraction=self.mismatch_fraction,
                    agreement=self.agreement, top1=self.top1)
        return data

    def describe(self) -> str:
        """The metrics a report shows for this output: ``cosine 0.999964, max abs 0.0196, top-1 99.6% of 500
        rows`` or ``99.6% agree (498 of 500)``, with the non-finite values that differ."""
        if self.problem is not None:
            return self.problem
        if self.exact:
            text = f"{percent(self.agreement or 0.0)} agree ({self.elements - self.mismatches} of {self.elements})"
        else:
            text = f"cosine {_num(self.cosine, '.6f')}, max abs {_num(self.max_abs, '.3g')}"
            if self.top1_rows:
                text += f", top-1 {percent(self.top1 or 0.0)} of {self.top1_rows} row(s)"
        if self.nonfinite_mismatches:
            text += f", {self.nonfinite_text()}"
        return text

    def nonfinite_text(self) -> str:
        """``NaN/inf differ at 24 of 24 elements (NaN 0 -> 0, inf 0 -> 24)``: original -> candidate counts."""
        return (f"NaN/inf differ at {self.nonfinite_mismatches} of {self.elements} elements "
                f"(NaN {self.nan_original} -> {self.nan_candidate}, inf {self.inf_original} -> {self.inf_candidate})")


def merge_runs(per_run: Sequence[OutputComparison], criterion: Criterion) -> OutputComparison:
    """Fold the comparisons of one output over several runs into one (worst values, summed counts), judged by
    ``criterion`` on the folded values (rates over every run's elements or rows together)."""
    first = per_run[0]
    problems = [c.problem for c in per_run if c.problem is not None]
    folded = dataclasses.replace(
        first,
        run=None,
        size_set=None,
        elements=sum(c.elements for c in per_run),
        mismatches=sum(c.mismatches for c in per_run),
        max_abs=_fold(max, [c.max_abs for c in per_run]),
        max_rel=_fold(max, [c.max_rel for c in per_run]),
        cosine=_fold(min, [c.cosine for c in per_run]),
        nan_original=sum(c.nan_original for c in per_run),
        nan_candidate=sum(c.nan_candidate for c in per_run),
        inf_original=sum(c.inf_original for c in per_run),
        inf_candidate=sum(c.inf_candidate for c in per_run),
        nonfinite_mismatches=sum(c.nonfinite_mismatches for c in per_run),
        top1_rows=sum(c.top1_rows for c in per_run),
        top1_agree=sum(c.top1_agree for c in per_run),
        problem=problems[0] if problems else None,
        max_abs_outside_rtol=_fold(max, [c.max_abs_outside_rtol for c in per_run]),
        noise_max_abs=_fold(max, [c.noise_max_abs for c in per_run]),
        noise_mismatches=_fold_count([c.noise_mismatches for c in per_run]),
    )
    failed = criterion.failures(folded)
    if any(c.noise_max_abs is not None or c.noise_mismatches for c in per_run):
        # judged against the noise of each run's own inputs (a long past moves more than a decode step)
        per_run_failed = {m for c in per_run for m in c.failed}
        failed = tuple(m for m in _METRIC_ORDER if (m in failed and m not in _NOISE_JUDGED)
                       or (m in _NOISE_JUDGED and m in per_run_failed))
    failed_sets = tuple(dict.fromkeys(c.size_set for c in per_run if c.size_set is not None and (
        c.problem is not None or set(c.failed) & set(failed))))
    return dataclasses.replace(folded, failed=failed, failed_sets=failed_sets)


#: failing outputs a summary names (the rest are counted)
LISTED_FAILURES = 4
_METRIC_ORDER = (NON_FINITE, AGREEMENT, ELEMENTS, COSINE, MAX_ABS, TOP1)
_NOISE_JUDGED = (AGREEMENT, ELEMENTS)


def _fold_count(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _fold(pick: Any, values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def _num(value: float | None, fmt: str) -> str:
    return "?" if value is None else format(value, fmt)


@dataclass
class ValidationReport:
    """The result of :func:`gsrewrite.validation.validate`.

    ``outputs`` holds one comparison per output of the original model, folded over all runs;
    ``per_run`` holds the same per size set and run (``size_set``, ``run``). ``runs`` is the number of input
    sets per size. ``sizes`` lists the size sets that ran, in order (``name``, the input ``shapes``, and the
    ``inputs`` described); ``inputs`` describes the first (the sample): shape, dtype, where it came from, the
    value range when generated. ``timings`` holds seconds per model and phase. ``criterion`` is the pass/fail
    rule (``atol``/``rtol`` are its own).
    """

    outputs: list[OutputComparison]
    per_run: list[OutputComparison]
    runs: int
    atol: float
    rtol: float
    seed: int
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra_outputs: list[str] = field(default_factory=list)
    timings: dict[str, dict[str, float]] = field(default_factory=dict)
    sizes: list[dict[str, Any]] = field(default_factory=list)
    criterion: Criterion | None = None
    #: where the tolerance was widened to the model's own noise: how that noise was measured (else ``None``)
    noise_source: str | None = None

    def __post_init__(self) -> None:
        if self.criterion is None:
            self.criterion = Criterion(atol=self.atol, rtol=self.rtol)

    @property
    def ok(self) -> bool:
        """True when every output of the original agrees in the candidate, in every run."""
        return all(o.ok for o in self.outputs)

    @property
    def failed(self) -> list[OutputComparison]:
        """The outputs that do not agree."""
        return [o for o in self.outputs if not o.ok]

    @property
    def worst(self) -> OutputComparison | None:
        """The float output with the largest max abs error (``None`` when no float output had comparable values:
        the distance between two class numbers says nothing)."""
        known = [o for o in self.outputs if o.max_abs is not None and not o.exact]
        return max(known, key=lambda o: o.max_abs or 0.0) if known else None

    @property
    def rule(self) -> str:
        """The pass/fail rule in words: ``atol=0.0001, rtol=0.001`` or ``cosine >= 0.99, agreement >= 99%``."""
        return (self.criterion or Criterion(atol=self.atol, rtol=self.rtol)).describe()

    def summary(self) -> str:
        """One line: the verdict, the tolerances, the worst or the failing outputs (at most
        :data:`LISTED_FAILURES`), and the shapes of the sets they failed in, each input named once."""
        tol = self.rule
        runs = f"{self.runs} run" + ("s" if self.runs != 1 else "")
        if len(self.sizes) > 1:
            runs += f" at each of {len(self.sizes)} input sizes ({', '.join(self.size_names())})"
        if self.ok:
            worst = self.worst
            detail = f" (worst: {worst.name} max abs {worst.max_abs:.3g}{_noise_text(worst)})" if worst else ""
            return f"OK: {len(self.outputs)} output(s) agree over {runs} within {tol}{self._widened()}{detail}"
        failed = self.failed
        parts = [_describe_failure(o, o.failed_sets, self.criterion) for o in failed[:LISTED_FAILURES]]
        more = f"; and {len(failed) - LISTED_FAILURES} more" if len(failed) > LISTED_FAILURES else ""
        sets = list(dict.fromkeys(name for o in failed for name in o.failed_sets))
        where = f" [{self._shapes_of(sets)}]" if sets else ""
        return (f"MISMATCH: {len(failed)} of {len(self.outputs)} output(s) disagree ({tol}{self._widened()}): "
                + "; ".join(parts) + more + where)

    def _widened(self) -> str:
        if self.noise_source is None:
            return ""
        factor = (self.criterion or Criterion()).noise_factor
        return f", or {factor:g}x the model's own noise where larger ({self.noise_source})"

    def size_names(self) -> list[str]:
        """``sample 2x16``, ``small 1x3``, ...: each size set that ran, with the shape of its first input."""
        return [f"{s['name']} {_shape_text(next(iter(s['shapes'].values()), []))}" for s in self.sizes]

    def _shapes_of(self, names: Sequence[str]) -> str:
        """``long set: input_ids 2x64, past_key_values.*.key 2x3x256x64 (x30), ...``: inputs named once, those
        that differ only in a layer number and share a shape grouped."""
        by_name = {s["name"]: s["shapes"] for s in self.sizes}
        return "; ".join(f"{name} set: {grouped_shapes(by_name.get(name, {}))}" for name in names)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN/Inf floats are left to the JSON writer)."""
        return {
            "ok": self.ok,
            "summary": self.summary(),
            "atol": self.atol,
            "rtol": self.rtol,
            "criterion": self.criterion.to_dict() if self.criterion is not None else None,
            "runs": self.runs,
            "seed": self.seed,
            "inputs": self.inputs,
            "outputs": [o.to_dict() for o in self.outputs],
            "per_run": [o.to_dict() for o in self.per_run],
            "extra_outputs": list(self.extra_outputs),
            "timings": self.timings,
            "sizes": self.sizes,
        }


def describe_failures(o: OutputComparison, criterion: Criterion | None) -> str:
    """``label: 80% agree (400 of 500), need >= 99%``: each metric on which ``o`` fails, with its limit."""
    if o.problem is not None:
        return f"{o.name}: {o.problem}"
    rule = criterion or Criterion()
    texts = []
    for metric in o.failed:
        if metric == NON_FINITE:
            texts.append(o.nonfinite_text())
        elif metric == ELEMENTS and o.noise_max_abs is not None and rule.noise_atol(o.noise_max_abs) > rule.atol:
            texts.append(f"max abs {_num(o.max_abs_outside_rtol, '.3g')} outside rtol, over "
                         f"{rule.noise_atol(o.noise_max_abs):.3g} ({rule.noise_factor:g}x the model's own noise "
                         f"{o.noise_max_abs:.3g})")
        elif metric == ELEMENTS:
            text = f"{o.mismatch_fraction:.3%} of elements outside tolerance"
            texts.append(text + (f", max abs {o.max_abs:.3g}" if o.max_abs is not None else ""))
        elif metric == COSINE:
            texts.append(f"cosine {_num(o.cosine, '.6f')}, need >= {rule.min_cosine:g}")
        elif metric == MAX_ABS:
            texts.append(f"max abs {_num(o.max_abs, '.3g')}, need <= {rule.max_abs:g}")
        elif metric == AGREEMENT:
            texts.append(f"{percent(o.agreement or 0.0)} agree ({o.elements - o.mismatches} of {o.elements}), "
                         f"need {'all' if rule.min_agreement >= 1.0 else '>= ' + percent(rule.min_agreement)}")
        elif metric == TOP1:
            texts.append(f"top-1 class kept in {percent(o.top1 or 0.0)} of {o.top1_rows} row(s), "
                         f"need >= {percent(rule.min_top1 or 0.0)}")
    return f"{o.name}: " + "; ".join(texts)


def _describe_failure(o: OutputComparison, failed_in: Sequence[str], criterion: Criterion | None) -> str:
    where = f" in the {' and the '.join(failed_in)} set{'s' if len(failed_in) > 1 else ''}" if failed_in else ""
    return describe_failures(o, criterion) + where


def _noise_text(o: OutputComparison) -> str:
    return f", its own noise {o.noise_max_abs:.3g}" if o.noise_max_abs else ""


def grouped_shapes(shapes: Mapping[str, Sequence[int] | str]) -> str:
    """``input_ids 2x1, past_key_values.*.key 2x3x16x64 (x30)``: input shapes (or descriptions such as
    ``float32[2, 8]``), the inputs whose names differ only in their numbers and share one written once."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, shape in shapes.items():
        text = shape if isinstance(shape, str) else _shape_text(shape)
        groups.setdefault((re.sub(r"\d+", "*", name), text), []).append(name)
    return ", ".join(f"{names[0] if len(names) == 1 else pattern} {shape}" + (f" (x{len(names)})" if len(names) > 1
                                                                            else "")
                     for (pattern, shape), names in groups.items())


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"
