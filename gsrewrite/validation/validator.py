"""``validate``: run the original and the candidate model on the same inputs and compare every output."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gsrewrite.errors import InputDataError, UsageError, ValidationError
from gsrewrite.validation.given_inputs import InputSource, describe_given, prepare_inputs
from gsrewrite.validation.inputs import generate_inputs, plan_inputs
from gsrewrite.validation.metrics import compare_output, missing_output
from gsrewrite.validation.report import OutputComparison, ValidationReport, merge_runs
from gsrewrite.validation.runner import ModelArg, ModelSource, Session, open_session, resolve_model
from gsrewrite.validation.shapes import GROWN_DEFAULTS, OTHER_DEFAULT, ShapeSpec, resolve_shapes
from gsrewrite.validation.signature import check_same_inputs, model_inputs

log = logging.getLogger(__name__)

Feeds = Callable[[int], dict[str, np.ndarray]]
#: Generated inputs are not grown beyond this many elements in all (64 MB of float32).
MAX_GROWN_ELEMENTS = 1 << 24
#: Generated inputs up to this many elements in all skip onnxruntime's memory-reuse planning.
SMALL_INPUT_ELEMENTS = 1 << 16


def validate(
    original: ModelArg,
    candidate: ModelArg,
    *,
    inputs: InputSource | None = None,
    input_shapes: ShapeSpec | None = None,
    runs: int = 1,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    seed: int = 0,
    providers: Sequence[str] | None = None,
) -> ValidationReport:
    """Run ``original`` and ``candidate`` in onnxruntime on the same inputs and compare their outputs.

    Both models are ``onnx.ModelProto`` objects or paths. ``inputs`` is a dict name -> array or the path
    of an ``.npz`` file; without it, ``runs`` input sets are generated from ``seed`` (``input_shapes``
    fixes dynamic dims: ``{"input_ids": (1, 128)}`` or ``{"batch": 1}``). With given inputs, ``runs``
    repeats them. An element disagrees when ``|a - b| > atol`` and ``|a - b| / |b| > rtol`` (polygraphy's
    rule, ``b`` from the original); integer and bool outputs must be equal.

    Raises :class:`~gsrewrite.errors.InputDataError` when the inputs do not fit the models (or the
    models take different inputs), :class:`~gsrewrite.errors.ValidationError` when onnxruntime cannot
    load or run a model, :class:`~gsrewrite.errors.UsageError` for bad options.
    """
    validator = Validator(original, inputs=inputs, input_shapes=input_shapes, runs=runs, atol=atol, rtol=rtol,
                          seed=seed, providers=providers)
    return validator.check(candidate)


class Validator:
    """The original model, run once per input set; :meth:`check` compares any number of candidates with it.

    Use it when several candidates are compared with one original (bisecting a failed rewrite): the
    original's session and outputs are computed once. Options are those of :func:`validate`.
    """

    def __init__(self, original: ModelArg, *, inputs: InputSource | None = None,
                 input_shapes: ShapeSpec | None = None, runs: int = 1, atol: float = 1e-4, rtol: float = 1e-3,
                 seed: int = 0, providers: Sequence[str] | None = None) -> None:
        _check_options(runs, atol, rtol)
        self.runs, self.atol, self.rtol, self.seed, self.providers = runs, atol, rtol, seed, providers
        self.original = resolve_model(original, "original")
        self.specs = model_inputs(self.original.proto)
        self.reuse_memory = not _small_inputs(self.specs, self.original, inputs, input_shapes)
        with open_session(self.original, providers, self.reuse_memory) as session:
            self.feeds, self.described, self.outputs = self._reference_runs(session, inputs, input_shapes)
            self.output_names = list(session.output_names)
            self.timings = {"original": _timings(self.original, session)}

    def _reference_runs(self, session: Session, inputs: InputSource | None, input_shapes: ShapeSpec | None
                        ) -> tuple[Feeds, dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """The inputs and the original's outputs. Generated inputs whose dynamic dims the original rejects
        (a convolution wider than 16 samples) are generated again with those dims larger (GROWN_DEFAULTS)."""
        tried: list[dict[str, dict[str, Any]]] = []
        for size in GROWN_DEFAULTS:
            feeds, described = _input_feeds(self.specs, self.original, inputs, input_shapes, self.seed, size)
            if tried and described == tried[-1]:
                break  # no dynamic dim follows the size: a larger one cannot help
            try:
                outputs = [_run(session, feeds(run), described) for run in range(self.runs)]
            except ValidationError:
                if inputs is not None or _elements(described) * 16 > MAX_GROWN_ELEMENTS:
                    raise
                tried.append(described)
                continue
            if tried:
                log.info("the original rejects generated inputs with dynamic dims of %s: used %d",
                         "/".join(str(s) for s in GROWN_DEFAULTS[:len(tried)]), size)
            return feeds, described, outputs
        feeds, described = _input_feeds(self.specs, self.original, inputs, input_shapes, self.seed)
        outputs = [_run(session, feeds(run), described) for run in range(self.runs)]  # raises, as first
        return feeds, described, outputs

    def check(self, candidate: ModelArg) -> ValidationReport:
        """Run ``candidate`` on the same inputs and compare its outputs with the original's."""
        model = resolve_model(candidate, "candidate")
        check_same_inputs(self.specs, model_inputs(model.proto))
        per_run: list[OutputComparison] = []
        with open_session(model, self.providers, self.reuse_memory) as session:
            for run in range(self.runs):
                outputs = _run(session, self.feeds(run), self.described)
                per_run += compare_run(run, self.outputs[run], outputs, self.atol, self.rtol)
            extra = [name for name in session.output_names if name not in self.output_names]
            timings = {**self.timings, "candidate": _timings(model, session)}
        report = ValidationReport(
            outputs=_fold_runs(per_run), per_run=per_run, runs=self.runs, atol=self.atol, rtol=self.rtol,
            seed=self.seed, inputs=self.described, extra_outputs=extra, timings=timings,
        )
        log.info("%s", report.summary())
        return report


def compare_run(
    run: int, original: Mapping[str, Any], candidate: Mapping[str, Any], atol: float, rtol: float
) -> list[OutputComparison]:
    """Compare the outputs of one run by name, in the original's output order.

    A sequence output ``s`` (a list of arrays) is compared item by item as ``s[0]``, ``s[1]``, ...
    """
    original, candidate = _flatten(original), _flatten(candidate)
    results = []
    for name, value in original.items():
        if name in candidate:
            results.append(compare_output(name, run, value, candidate[name], atol, rtol))
        else:
            results.append(missing_output(name, run, value))
    return results


def _flatten(outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    flat: dict[str, np.ndarray] = {}
    for name, value in outputs.items():
        if isinstance(value, list):
            flat.update({f"{name}[{i}]": np.asarray(item) for i, item in enumerate(value)})
        else:
            flat[name] = np.asarray(value)
    return flat


def _run(session: Session, feed: dict[str, np.ndarray], described: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Run one model; when generated inputs make it fail, say what they were and how to change them."""
    try:
        return session.run(feed)
    except ValidationError as exc:
        if not described or any(d["source"] != "generated" for d in described.values()):
            raise
        shapes = ", ".join(f"{name} {d['dtype']}{d['shape']}" for name, d in described.items())
        raise ValidationError(f"{exc} (generated inputs: {shapes}; set shapes with --input-shape)") from None


def _input_feeds(
    specs: list[Any],
    original: ModelSource,
    inputs: InputSource | None,
    input_shapes: ShapeSpec | None,
    seed: int,
    other_size: int = OTHER_DEFAULT,
) -> tuple[Feeds, dict[str, dict[str, Any]]]:
    if inputs is not None:
        if input_shapes:
            raise UsageError("input shapes apply to generated inputs; they cannot be combined with given inputs")
        feed = prepare_inputs(inputs, specs)
        return (lambda run: feed), describe_given(feed)
    plans = plan_inputs(original.proto, specs, input_shapes, other_size)
    for plan in plans:
        log.info("input %s: %s", plan.name, plan.describe())
    return (lambda run: generate_inputs(plans, seed + run)), {p.name: p.describe() for p in plans}


def _small_inputs(specs: list[Any], original: ModelSource, inputs: InputSource | None,
                  input_shapes: ShapeSpec | None) -> bool:
    """Inputs of at most SMALL_INPUT_ELEMENTS in all (token ids, short audio), even at the largest size the
    dynamic dims may grow to: activations stay small enough to give every intermediate its own buffer.
    Unknown sizes count as large."""
    if inputs is not None:
        return False
    try:  # the shapes alone: the value ranges (a walk over the graph) are planned once, for the real inputs
        shapes = resolve_shapes(specs, input_shapes, GROWN_DEFAULTS[-1])
    except (InputDataError, UsageError):
        return False
    return sum(int(np.prod(shape)) for shape in shapes.values()) <= SMALL_INPUT_ELEMENTS


def _elements(described: dict[str, dict[str, Any]]) -> int:
    return sum(int(np.prod(d["shape"])) for d in described.values())


def _fold_runs(per_run: list[OutputComparison]) -> list[OutputComparison]:
    by_name: dict[str, list[OutputComparison]] = {}
    for comparison in per_run:
        by_name.setdefault(comparison.name, []).append(comparison)
    return [merge_runs(group) for group in by_name.values()]


def _timings(model: ModelSource, session: Session) -> dict[str, float]:
    return {"load": model.load_seconds, "session": session.create_seconds, "run": session.run_seconds}


def _check_options(runs: int, atol: float, rtol: float) -> None:
    if not isinstance(runs, int) or runs < 1:
        raise UsageError(f"runs must be a positive integer, got {runs!r}")
    if not (atol >= 0 and rtol >= 0):  # also rejects NaN
        raise UsageError(f"tolerances must be non-negative numbers, got atol={atol!r}, rtol={rtol!r}")
