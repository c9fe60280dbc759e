"""Validation of a simplified model, and bisection to the pass that broke it.

The original model runs once (:class:`gsrewrite.validation.Validator`); every candidate is compared with
those outputs. A candidate onnxruntime cannot load or run counts as a failed comparison (that is a bug in
a pass, not in the user's model). When the result fails, the passes that changed something are bisected
(smallest failing prefix, in pipeline order): the last pass of that prefix is dropped and the rest runs
again, until the result agrees — at worst the original model comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from gsrewrite.errors import CannotValidateError, InputDataError, ValidationError
from gsrewrite.protocols import GraphPass

log = logging.getLogger(__name__)

#: Runs the pipeline with the given passes: (model, changes per pass, rounds).
Runner = Callable[[Sequence[GraphPass]], "tuple[onnx.ModelProto, dict[str, int], int]"]


@dataclass(frozen=True)
class Rejected:
    """The verdict on a candidate onnxruntime could not load or run (shaped like a ValidationReport)."""

    reason: str
    ok: bool = False

    def summary(self) -> str:
        return f"FAILED: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"ok": False, "summary": self.summary(), "outputs": []}


class Checker:
    """Compares candidates with ``original`` (``options``: keyword arguments of :func:`gsrewrite.validate`).

    The original runs on a worker thread from :meth:`start` on (``simplify`` calls it before the passes when the
    model has the usual cleanup work, else when a pass first changes the model: a model nothing changes costs no
    onnxruntime session); the first comparison starts it if nobody did, and waits for it.
    """

    def __init__(self, original: Any, options: dict[str, Any],
                 on_serialized: Callable[[onnx.ModelProto, bytes], None] | None = None) -> None:
        """``original``: a ModelProto, or a :class:`~gsrewrite.validation.runner.ModelSource` (e.g. its file).
        ``on_serialized(candidate, data)`` is called before each comparison with the bytes onnxruntime runs."""
        from gsrewrite.validation.background import LazyValidator

        self._pending = LazyValidator(original, **options)
        self._on_serialized = on_serialized
        self._validator: Any = None
        self._last: tuple[onnx.ModelProto, bytes | None] | None = None

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
        """``model`` serialized, when it is the candidate compared last (its bytes are what onnxruntime ran)."""
        return self._last[1] if self._last is not None and self._last[0] is model else None

    def __call__(self, candidate: onnx.ModelProto) -> Any:
        from gsrewrite.validation.runner import serialized_source

        validator = self._ready()
        source = serialized_source(candidate, "candidate")
        self._last = (candidate, source.data)
        if self._on_serialized is not None and source.data is not None:
            self._on_serialized(candidate, source.data)
        try:
            return validator.check(source)
        except (ValidationError, InputDataError) as exc:
            return Rejected(str(exc).splitlines()[0])


def validate_and_bisect(model: onnx.ModelProto, counts: dict[str, int], passes: Sequence[GraphPass],
                        run: Runner, check: Checker) -> tuple[onnx.ModelProto, dict[str, int], Any, dict[str, str]]:
    """The validated result: (model, counts, last verdict, dropped pass -> why). When even the run without
    any pass fails (fixing the input shapes alone changes the outputs) the verdict is not ok and the
    caller keeps the original."""
    report = check(model)
    dropped: dict[str, str] = {}
    active = [p for p in passes if counts.get(p.name)]
    while not report.ok and active:
        guilty = _first_failing(active, run, check)
        log.warning("pass %s changes the outputs (%s): dropping it", guilty.name, report.summary())
        dropped[guilty.name] = report.summary()
        active = [p for p in active if p is not guilty]
        model, counts, _ = run(active)
        report = check(model)
    return model, counts, report, dropped


def _first_failing(active: list[GraphPass], run: Runner, check: Checker) -> GraphPass:
    """The last pass of the smallest prefix of ``active`` whose result fails validation."""
    low, high = 1, len(active)
    while low < high:
        mid = (low + high) // 2
        model, counts, _ = run(active[:mid])
        if counts and not check(model).ok:
            high = mid
        else:
            low = mid + 1
    return active[high - 1]
