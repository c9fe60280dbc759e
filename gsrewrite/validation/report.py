"""What a validation found: one :class:`OutputComparison` per output (and run), gathered in a report."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OutputComparison:
    """How one output of the candidate compares with the original's, in one run or over all runs.

    ``max_abs``/``max_rel``/``cosine`` are taken over the elements that are finite in both models; they are
    ``None`` when nothing could be compared (missing output, shape mismatch, string output).
    ``mismatches`` counts the elements outside tolerance (see ``docs/validation.md`` for the rule),
    including non-finite values that differ. ``problem`` is set when the output cannot agree whatever its
    values (missing in the candidate, different shape or dtype).
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

    @property
    def ok(self) -> bool:
        """True when the candidate's output agrees element by element within tolerance."""
        return self.problem is None and self.mismatches == 0

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
        data.update(ok=self.ok, verdict=self.verdict, mismatch_fraction=self.mismatch_fraction)
        return data


def merge_runs(per_run: Sequence[OutputComparison]) -> OutputComparison:
    """Fold the comparisons of one output over several runs into one (worst values, summed counts)."""
    first = per_run[0]
    problems = [c.problem for c in per_run if c.problem is not None]
    failed_sets = tuple(dict.fromkeys(c.size_set for c in per_run if not c.ok and c.size_set is not None))
    return dataclasses.replace(
        first,
        run=None,
        size_set=None,
        failed_sets=failed_sets,
        elements=sum(c.elements for c in per_run),
        mismatches=sum(c.mismatches for c in per_run),
        max_abs=_fold(max, [c.max_abs for c in per_run]),
        max_rel=_fold(max, [c.max_rel for c in per_run]),
        cosine=_fold(min, [c.cosine for c in per_run]),
        nan_original=sum(c.nan_original for c in per_run),
        nan_candidate=sum(c.nan_candidate for c in per_run),
        inf_original=sum(c.inf_original for c in per_run),
        inf_candidate=sum(c.inf_candidate for c in per_run),
        problem=problems[0] if problems else None,
    )


def _fold(pick: Any, values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return pick(known) if known else None


@dataclass
class ValidationReport:
    """The result of :func:`gsrewrite.validation.validate`.

    ``outputs`` holds one comparison per output of the original model, folded over all runs;
    ``per_run`` holds the same per size set and run (``size_set``, ``run``). ``runs`` is the number of input
    sets per size. ``sizes`` lists the size sets that ran, in order (``name``, the input ``shapes``, and the
    ``inputs`` described); ``inputs`` describes the first (the sample): shape, dtype, where it came from, the
    value range when generated. ``timings`` holds seconds per model and phase.
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
        """The output with the largest max abs error (``None`` when no output had comparable values)."""
        known = [o for o in self.outputs if o.max_abs is not None]
        return max(known, key=lambda o: o.max_abs or 0.0) if known else None

    def summary(self) -> str:
        """One line: the verdict, the tolerances, and the worst or the failing outputs."""
        tol = f"atol={self.atol:g}, rtol={self.rtol:g}"
        runs = f"{self.runs} run" + ("s" if self.runs != 1 else "")
        if len(self.sizes) > 1:
            runs += f" at each of {len(self.sizes)} input sizes ({', '.join(self.size_names())})"
        if self.ok:
            worst = self.worst
            detail = f" (worst: {worst.name} max abs {worst.max_abs:.3g})" if worst else ""
            return f"OK: {len(self.outputs)} output(s) agree over {runs} within {tol}{detail}"
        parts = [_describe_failure(o, self._shapes_of(o.failed_sets)) for o in self.failed]
        return f"MISMATCH: {len(parts)} of {len(self.outputs)} output(s) disagree ({tol}): " + "; ".join(parts)

    def size_names(self) -> list[str]:
        """``sample 2x16``, ``small 1x3``, ...: each size set that ran, with the shape of its first input."""
        return [f"{s['name']} {_shape_text(next(iter(s['shapes'].values()), []))}" for s in self.sizes]

    def _shapes_of(self, names: Sequence[str]) -> list[str]:
        by_name = {s["name"]: s["shapes"] for s in self.sizes}
        return [f"{name} set ({', '.join(f'{k} {_shape_text(v)}' for k, v in by_name.get(name, {}).items())})"
                for name in names]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN/Inf floats are left to the JSON writer)."""
        return {
            "ok": self.ok,
            "summary": self.summary(),
            "atol": self.atol,
            "rtol": self.rtol,
            "runs": self.runs,
            "seed": self.seed,
            "inputs": self.inputs,
            "outputs": [o.to_dict() for o in self.outputs],
            "per_run": [o.to_dict() for o in self.per_run],
            "extra_outputs": list(self.extra_outputs),
            "timings": self.timings,
            "sizes": self.sizes,
        }


def _describe_failure(o: OutputComparison, failed_in: list[str]) -> str:
    where = f" in the {' and the '.join(failed_in)}" if failed_in else ""
    if o.problem is not None:
        return f"{o.name}: {o.problem}{where}"
    text = f"{o.name}: {o.mismatch_fraction:.3%} of elements outside tolerance"
    if o.max_abs is not None:
        text += f", max abs {o.max_abs:.3g}"
    return text + where


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"
