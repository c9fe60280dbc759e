"""The one validate-and-bisect loop: for patterns (``apply``), passes (``simplify``), and any list of steps; its
binary search, :func:`first_failing`, is compress's too (nodes).

The original model runs once (:class:`Checker`, on a worker thread); every candidate is compared with those
outputs. A candidate onnxruntime cannot load or run is a *failed* candidate (a bug in a step, not in the user's
model): it is dropped and bisected exactly like a numeric mismatch. Only the original failing to load is an
error (:class:`~gsrewrite.errors.CannotValidateError`). When the result fails, the steps that changed something
are bisected (smallest failing prefix, in application order): the last step of that prefix is dropped, the rest is
built again, until the result agrees — at worst the caller gives back the original.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import onnx

from gsrewrite.errors import CannotValidateError, InputDataError, ValidationError
from gsrewrite.model_io.staging import offer

log = logging.getLogger(__name__)

Step = TypeVar("Step")
Detail = TypeVar("Detail")


@dataclass(frozen=True)
class Rejected:
    """The verdict on a candidate onnxruntime could not load or run (shaped like a ValidationReport)."""

    reason: str
    ok: bool = False

    def summary(self) -> str:
        return f"FAILED: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"ok": False, "summary": self.summary(), "outputs": []}


@dataclass
class Candidate(Generic[Detail]):
    """A model built from some of the steps: ``changed`` when any step changed anything; ``detail`` is whatever
    the builder reports besides (counts, match records ...)."""

    model: onnx.ModelProto
    changed: bool
    detail: Detail


@dataclass
class Outcome(Generic[Step, Detail]):
    """The loop's result: the last candidate, its verdict, the steps kept, and dropped step name -> why."""

    candidate: Candidate[Detail]
    report: Any
    kept: list[Step]
    dropped: dict[str, str] = field(default_factory=dict)


class Checker:
    """Compares candidates with the original, whose validator ``pending`` (a
    :class:`~gsrewrite.validation.background.LazyValidator`) prepares on a worker thread.

    The first comparison starts the reference run if nobody did, and waits for it. Each candidate's bytes go to
    :func:`gsrewrite.model_io.staging.offer` before the comparison (a save open around the call writes them
    meanwhile).
    """

    def __init__(self, pending: Any) -> None:
        self._pending = pending
        self._validator: Any = None
        self._last: tuple[onnx.ModelProto, bytes | None] | None = None

    @classmethod
    def of(cls, original: Any, options: dict[str, Any]) -> Checker:
        """A checker for ``original`` (a ModelProto or a model handle, :class:`~gsrewrite.model_io.source.Source`)
        with :func:`gsrewrite.validate`'s ``options``, not started yet."""
        from gsrewrite.validation.background import LazyValidator

        return cls(LazyValidator(original, **options))

    @property
    def started(self) -> bool:
        return bool(self._pending.started)

    def start(self) -> None:
        """Start the reference run on a worker thread (once)."""
        self._pending.start()

    def close(self) -> None:
        """Wait for the reference run, if started, when no comparison will need it (errors are not raised)."""
        self._pending.join()

    def ensure_runnable(self) -> None:
        """When nothing changed: raise CannotValidateError if onnxruntime cannot run the original."""
        self._pending.ensure_runnable()

    def _ready(self) -> Any:
        if self._validator is None:
            try:
                self._validator = self._pending.get()
            except CannotValidateError:
                raise
            except ValidationError as exc:  # the original itself cannot run: nothing to compare with
                raise ValidationError(f"{str(exc).splitlines()[0]} (skip validation with --no-validate)") from None
        return self._validator

    def serialized(self, model: onnx.ModelProto) -> bytes | None:
        """``model`` serialized, when it is the candidate compared last (the model onnxruntime ran)."""
        return self._last[1] if self._last is not None and self._last[0] is model else None

    def __call__(self, candidate: onnx.ModelProto) -> Any:
        """The verdict on ``candidate``: a ValidationReport, or :class:`Rejected` when onnxruntime cannot load
        or run it."""
        from gsrewrite.model_io.source import Source
        from gsrewrite.model_io.weights import has_references
        from gsrewrite.validation.runner import serialized_source

        # the bytes a save needs, encoded while the reference run may still be going; onnxruntime itself gets the
        # candidate without its weights serialized (validation.in_memory). Encoding them on a worker thread
        # beside the comparison measured no faster. A candidate whose weights stay in their files is saved by
        # copying them from there, never as these bytes: onnxruntime gets its graph and the payloads a rewrite
        # made, without a serialized copy of those
        source = Source(candidate, role="candidate") if has_references(candidate) \
            else serialized_source(candidate, "candidate")
        self._last = (candidate, source.data)
        if source.data is not None:
            offer(candidate, source.data)
        validator = self._ready()
        try:
            return validator.check(source)
        except (ValidationError, InputDataError) as exc:
            return Rejected(str(exc).splitlines()[0])


def validate_and_bisect(first: Candidate[Detail], steps: Sequence[Step],
                        build: Callable[[list[Step]], Candidate[Detail]], check: Checker, *,
                        name: Callable[[Step], str], kind: str = "step") -> Outcome[Step, Detail]:
    """Check ``first`` (built from all of ``steps``, the ones that changed nothing already left out); while it
    fails, find the guilty step by bisection, drop it and build again. The verdict of the returned outcome is
    not ok when even the build without any step fails: the caller then keeps the original."""
    candidate, report = first, check(first.model)
    outcome: Outcome[Step, Detail] = Outcome(candidate, report, list(steps))
    while not report.ok and outcome.kept:
        guilty = _first_failing(outcome.kept, build, check)
        log.warning("%s %s fails validation (%s): dropping it", kind, name(guilty), report.summary())
        outcome.dropped[name(guilty)] = report.summary()
        outcome.kept = [s for s in outcome.kept if s is not guilty]
        candidate = build(outcome.kept)
        report = check(candidate.model)
    outcome.candidate, outcome.report = candidate, report
    return outcome


def first_failing(steps: Sequence[Step], fails: Callable[[list[Step]], bool],
                  more: Callable[[], bool] | None = None) -> int | None:
    """The index of the last step of the smallest prefix of ``steps`` for which ``fails`` holds (the whole list is
    known to fail): the one binary search of validation (patterns, passes) and of compress (nodes). ``more``, asked
    before each probe, may cut the search short: None then (no culprit named)."""
    low, high = 1, len(steps)
    while low < high and (more is None or more()):
        mid = (low + high) // 2
        if fails(list(steps[:mid])):
            high = mid
        else:
            low = mid + 1
    return high - 1 if low >= high and steps else None


def _first_failing(active: list[Step], build: Callable[[list[Step]], Candidate[Any]], check: Checker) -> Step:
    """The last step of the smallest prefix of ``active`` whose candidate fails validation."""
    def fails(prefix: list[Step]) -> bool:
        candidate = build(prefix)
        return candidate.changed and not check(candidate.model).ok

    index = first_failing(active, fails)
    assert index is not None
    return active[index]
