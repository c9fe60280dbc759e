"""``compress``: run a compression strategy (registered through ``gsrewrite_register_compression_strategies``),
validate the result against the uncompressed model with the strategy's tolerance (the comparison of
:mod:`gsrewrite.validation`: cosine / max abs of float outputs, agreement of integer and bool outputs, top-1 of
class scores, NaN/inf where the original is finite always failing; on validation's inputs and sizes), and report
sizes, errors, what the output graph holds and latency.

When the compressed model misses the tolerance and the strategy reports which nodes it changed and accepts
``exclude``, the nodes are bisected: the smallest prefix of them whose compression fails is found, its last
node is excluded, and the strategy runs again, until the result passes. Nothing is written (typed
:class:`~gsrewrite.errors.CompressionRefused` errors, exit code 1) when the result cannot pass, when the strategy
changed no weight, or when the result was measured slower than its input by more than ``MAX_SLOWDOWN``
(unless ``allow_slower``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import onnx

from gsrewrite import plugin_hooks
from gsrewrite.errors import (
    ModelTooLargeError,
    NothingToCompressError,
    OutOfToleranceError,
    SlowerModelError,
    UsageError,
)
from gsrewrite.model_io.functions import expansion_problem
from gsrewrite.model_io.saving import serialized_size
from gsrewrite.model_io.tensors import initializer_bytes
from gsrewrite.model_io.weights import has_references, inlined, materialized, weights_from
from gsrewrite.pipelines.compressed_graph import Census, census, same_weights
from gsrewrite.pipelines.options import TOLERANCE_FIELDS
from gsrewrite.protocols import CompressionStrategy, Tolerance
from gsrewrite.registry import NamedRegistry
from gsrewrite.reporting import Report, Table, size_text
from gsrewrite.stages import release, stage, weights
from gsrewrite.validation.criteria import Criterion
from gsrewrite.validation.report import OutputComparison, describe_failures
from gsrewrite.validation.run_limits import time_limited_runs

if TYPE_CHECKING:
    from gsrewrite.pipelines.options import Source
    from gsrewrite.validation import Validator


log = logging.getLogger(__name__)

#: most strategy runs one bisection may take
MAX_BISECT_RUNS = 40
#: a compressed model whose latency is more than this times its input's is refused (unless allow_slower)
MAX_SLOWDOWN = 1.10
#: with generated inputs, labels (integer/bool outputs) and class scores are judged on at least this many elements
#: or rows when a validation run gives fewer: more input sets are drawn, up to MAX_RATE_RUNS per size
MIN_RATE_SAMPLES = 200
MAX_RATE_RUNS = 64
#: a bisection stops (the result refused as out of tolerance) before a step that would end past this many times
#: what the first compression and its validation took: a compress that misses its tolerance ends within ~5x one
#: compress (one compress also benches and saves)
BISECT_TIME_FACTOR = 3.5
#: the option that relaxes each metric a tolerance judges (a NaN/inf pattern is never relaxed)
RELAXED_BY = {"cosine": "--min-cosine", "max abs": "--max-abs", "agreement": "--min-agreement", "top-1": "--min-top1"}
#: the fields of a Tolerance, each overridable in compress()
def strategies() -> NamedRegistry[CompressionStrategy]:
    """Every registered strategy (built-in and plugins'), by name."""
    registry: NamedRegistry[CompressionStrategy] = NamedRegistry("compression strategy")
    plugin_hooks.register_compression_strategies(registry)
    return registry


def tolerance_of(strategy: Any, **overrides: float | None) -> Tolerance:
    """The strategy's tolerance (a plugin's may be any object with Tolerance's fields), with the given values
    in place of its own."""
    own = getattr(strategy, "tolerance", None) or Tolerance()
    defaults = Tolerance()
    values = {name: getattr(own, name, getattr(defaults, name)) for name in TOLERANCE_FIELDS}
    values.update({name: value for name, value in overrides.items() if value is not None})
    return Tolerance(**values)


@dataclass
class CompressResult:
    """A validated compression: the model, its sizes, each output's comparison with the uncompressed model
    (``outputs``: :class:`~gsrewrite.validation.OutputComparison`), what the output graph holds (``census``) and the
    latency before/after."""

    model: onnx.ModelProto
    strategy: str
    options: dict[str, Any]
    tolerance: Tolerance
    notes: list[str] = field(default_factory=list)
    file_bytes: tuple[int, int] = (0, 0)
    weight_bytes: tuple[int, int] = (0, 0)
    outputs: list[OutputComparison] = field(default_factory=list)
    validated: bool = False
    excluded: list[str] = field(default_factory=list)
    latency_ms: tuple[float, float] | None = None
    census: Census | None = None
    #: input sets per size the validation ran (more than one when labels or class scores needed more rows)
    validation_runs: int = 1
    #: the folder the model's weight references are relative to (a model read weightless: save it with
    #: ``save_model(..., weights_dir=)``), else None
    weights_dir: str | None = None

    @property
    def criterion(self) -> Criterion:
        return Criterion.of(self.tolerance)

    @property
    def ok(self) -> bool:
        return not self.validated or all(o.ok for o in self.outputs)

    def failures(self) -> str:
        """``label: 80% agree (400 of 500), need >= 99%; y: ...``: the outputs out of tolerance and why."""
        return "; ".join(describe_failures(o, self.criterion) for o in self.outputs if not o.ok)

    def report_blocks(self) -> Report:
        """Sizes (and latency) before/after, the strategy's notes, what the output graph holds, each output against
        the uncompressed model: report blocks, as every command's (:mod:`gsrewrite.reporting`)."""
        rows = [_ratio_row("file", *self.file_bytes, size_text), _ratio_row("weights", *self.weight_bytes, size_text)]
        if self.latency_ms is not None:
            rows.append(_ratio_row("latency (onnxruntime, min of interleaved runs)", *self.latency_ms,
                                   lambda ms: f"{ms:.2f} ms"))
        report = Report([Table(f"Compression: {self.strategy}", ("", "before", "after", "ratio"), rows)])
        report.blocks += [f"{self.strategy}: {note}" for note in self.notes]
        if self.census is not None:
            report.blocks.append(f"Output graph: {self.census.text()}")
        if self.excluded:
            report.blocks.append(f"Left uncompressed to meet the tolerance: {', '.join(self.excluded)}")
        if not self.validated:
            report.blocks.append("Not validated")
            return report
        runs = f"; {self.validation_runs} input sets per size" if self.validation_runs > 1 else ""
        report.blocks.append(Table(f"Outputs vs the uncompressed model ({self.criterion.describe()}{runs})",
                                   ("output", "comparison", "verdict"),
                                   [(o.name, o.describe(), "ok" if o.ok else
                                     f"OUT OF TOLERANCE ({', '.join(o.failed) or o.verdict})") for o in self.outputs]))
        return report

    def report(self) -> str:
        return self.report_blocks().text()

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "options": self.options, "notes": self.notes, "ok": self.ok,
                "file_bytes": {"before": self.file_bytes[0], "after": self.file_bytes[1],
                               "ratio": round(self.file_bytes[1] / max(self.file_bytes[0], 1), 4)},
                "weight_bytes": {"before": self.weight_bytes[0], "after": self.weight_bytes[1],
                                 "ratio": round(self.weight_bytes[1] / max(self.weight_bytes[0], 1), 4)},
                "tolerance": {name: getattr(self.tolerance, name) for name in TOLERANCE_FIELDS},
                "graph": None if self.census is None else self.census.to_dict(),
                "validated": self.validated, "validation_runs": self.validation_runs, "excluded": self.excluded,
                "outputs": [{"name": o.name, "max_abs": o.max_abs, "cosine": o.cosine, "agreement": o.agreement,
                             "top1": o.top1, "top1_rows": o.top1_rows, "elements": o.elements,
                             "nonfinite_mismatches": o.nonfinite_mismatches, "problem": o.problem,
                             "failed": list(o.failed), "within_tolerance": o.ok} for o in self.outputs],
                "latency_ms": None if self.latency_ms is None else
                {"before": round(self.latency_ms[0], 4), "after": round(self.latency_ms[1], 4),
                 "ratio": round(self.latency_ms[1] / self.latency_ms[0], 4)}}


def _ratio_row(label: str, before: float, after: float, unit: Callable[[float], str]) -> tuple[str, ...]:
    return (label, unit(before), unit(after), f"{after / before:.3f}x" if before else "")


def weight_bytes(model: onnx.ModelProto) -> int:
    """The declared bytes of the model's initializers (:func:`~gsrewrite.model_io.tensors.initializer_bytes`)."""
    return initializer_bytes(model)


def compress(model: onnx.ModelProto | str | Source, strategy: str, *, validate: bool = True, inputs: Any = None,
             input_shapes: Any = None, min_cosine: float | None = None, max_abs: float | None = None,
             min_agreement: float | None = None, min_top1: float | None = None, bench_runs: int = 0,
             bench_threads: int = 1, allow_slower: bool = False, reference: onnx.ModelProto | None = None,
             contracts: Sequence[str] = (), **options: Any) -> CompressResult:
    """Compress ``model`` with the strategy called ``strategy`` (``options`` go to it), validate against
    ``reference`` (default: ``model``; ``optimize --compress`` gives the unfused input) with the strategy's
    tolerance (``min_cosine``, ``max_abs``, ``min_agreement``, ``min_top1`` replace its values), time both when
    ``bench_runs`` > 0 (one model at a time), report. ``contracts``: the input contracts ``model`` was fused under
    (``optimize --contract``): validation tries only the inputs they keep, as the fusions' did.

    ``model`` may be a :class:`~gsrewrite.pipelines.options.Source` read with its weights left in their files
    (``Source.mapped``): a strategy that reads weights one at a time (``reads_references = True``: int4, int8,
    dynamic-int8) never holds them all, onnxruntime maps them, and the result keeps references to the weights it
    did not change (``result.weights_dir``: save with it). Other strategies get the weights read in first.

    Raises :class:`~gsrewrite.errors.NothingToCompressError` when the strategy changed no weight,
    :class:`~gsrewrite.errors.OutOfToleranceError` when the result misses the tolerance (after bisection),
    :class:`~gsrewrite.errors.SlowerModelError` when it was measured more than ``MAX_SLOWDOWN`` times slower than
    the input and ``allow_slower`` is false; each carries the ``CompressResult`` as ``result``.
    """
    from gsrewrite.pipelines.options import Source

    source = Source.of(model)
    with weights_from(source.weights_dir), weights(weight_bytes(source.model)):
        result = _compress(source, strategy, validate, inputs, input_shapes,
                           {"min_cosine": min_cosine, "max_abs": max_abs, "min_agreement": min_agreement,
                            "min_top1": min_top1}, bench_runs, bench_threads, allow_slower, reference, options,
                           tuple(contracts))
        inlined(result.model)  # the payloads it made, out of the scratch file that ends with the request
    result.weights_dir = source.weights_dir if has_references(result.model) else None
    return result


def _compress(source: Source, strategy: str, validate: bool, inputs: Any, input_shapes: Any,
              limits: dict[str, float | None], bench_runs: int, bench_threads: int, allow_slower: bool,
              reference: onnx.ModelProto | None, options: dict[str, Any], contracts: tuple[str, ...] = ()
              ) -> CompressResult:
    original = source.model
    baseline: Any = reference if reference is not None else source.reference()
    chosen = strategies().get(strategy)
    tolerance = tolerance_of(chosen, **limits)
    Criterion.of(tolerance).check()
    given = {k: v for k, v in options.items() if v is not None}
    problem = expansion_problem(original)  # strategies hand the model to onnx and onnxruntime, which expand them
    if problem is not None:
        raise ModelTooLargeError(f"cannot compress the model: {problem}")
    if validate:  # a model onnxruntime will not run cannot be compared (nor calibrated): say so before any work
        from gsrewrite.validation.runner import cannot_validate, why_unrunnable

        reason = why_unrunnable(getattr(baseline, "proto", baseline))
        if reason is not None:
            raise cannot_validate(reason)
    unknown = sorted(set(given) - set(getattr(chosen, "options", given)))
    if unknown:  # before the reference run (minutes on a large model)
        raise UsageError(f"strategy {strategy!r} has no option {unknown[0]!r} "
                         f"(options: {', '.join(getattr(chosen, 'options', ()))})")
    validator = None
    start = time.perf_counter()  # one compression: the reference run, the strategy, the candidate's validation
    if validate:  # the reference first, alone in memory: a model onnxruntime cannot run is bad input (exit 2)
        with stage("validating: reference run"):
            validator = _reference(baseline, inputs, input_shapes, Criterion.of(tolerance), contracts)
    timed = _time_original(baseline, inputs, input_shapes, bench_runs, bench_threads) if bench_runs else None
    # a strategy that reads weights as arrays from the proto gets them read in (a copy of every weight)
    given_model = original if getattr(chosen, "reads_references", False) or not has_references(original) \
        else materialized(original)
    with stage(f"compressing ({strategy})"):
        compressed, notes, changed = _run(chosen, given_model, given)
    result = CompressResult(compressed, strategy, given, tolerance, notes)
    result.file_bytes = (serialized_size(original), serialized_size(compressed))
    result.weight_bytes = (weight_bytes(original), weight_bytes(compressed))
    result.census = census(compressed)
    if result.weight_bytes[1] >= result.weight_bytes[0] and same_weights(given_model, compressed):
        why = "; ".join(notes) or "the strategy left every weight as it was"
        raise NothingToCompressError(f"nothing to compress: {strategy} changed no weight of the model ({why}); "
                                     "nothing written", result)
    if validator is not None:
        _validate(result, chosen, given_model, given, changed, validator, start)
    if timed is not None:
        _bench(result, timed, bench_runs, bench_threads, allow_slower)
    return result


def _reference(baseline: Any, inputs: Any, input_shapes: Any, criterion: Criterion,
               contracts: tuple[str, ...] = ()) -> Validator:
    """The original's outputs on validation's inputs, with as many input sets per size as the rates need (a few
    labels cannot show a 1% change: judged on more generated sets, see :func:`_rate_runs`). Runs before the
    strategy, so that onnxruntime's session of the original never shares memory with the compressed model."""
    from gsrewrite.validation import Validator
    from gsrewrite.validation.validator import compare_run

    validator = Validator(baseline, inputs=inputs, input_shapes=input_shapes, criterion=criterion,
                          contracts=contracts)
    if inputs is not None:
        return validator
    samples: dict[str, int] = {}  # elements of each label output, rows of each set of class scores
    for outputs in validator.outputs:  # the original against itself: which outputs hold labels or class scores
        for compared in compare_run(0, outputs[0], outputs[0], criterion.atol, criterion.rtol, criterion=criterion,
                                    class_axes=validator.class_axes):
            if compared.exact or compared.top1_rows:
                count = compared.elements if compared.exact else compared.top1_rows
                samples[compared.name] = samples.get(compared.name, 0) + count
        validator.kept.release(outputs[0])
    runs = _rate_runs(list(samples.values()))
    if runs == 1:
        return validator
    del validator
    release()
    return Validator(baseline, input_shapes=input_shapes, runs=runs, criterion=criterion, contracts=contracts)


def _load(path: str) -> onnx.ModelProto:
    from gsrewrite.model_io import load_model

    return load_model(path)


def _run(strategy: Any, model: onnx.ModelProto, options: dict[str, Any]
         ) -> tuple[onnx.ModelProto, list[str], list[str]]:
    # a strategy's own onnxruntime runs (calibration) have the run time limit too
    with time_limited_runs(f"the model, run by the {strategy.name} strategy,"):
        answer = strategy.apply(model, **options)
    if isinstance(answer, onnx.ModelProto):
        return answer, [], []
    if not isinstance(getattr(answer, "model", None), onnx.ModelProto):
        raise UsageError(f"compression strategy {strategy.name!r} returned {type(answer).__name__}, not a model")
    return answer.model, list(getattr(answer, "notes", [])), list(getattr(answer, "quantized_nodes", []))


def _validate(result: CompressResult, strategy: Any, original: onnx.ModelProto, options: dict[str, Any],
              changed: list[str], validator: Validator, start: float) -> None:
    """Compare with the original's outputs (computed once), bisect when the strategy allows it, or raise.
    ``start``: when the compression began, its reference run included (a bisection may take BISECT_TIME_FACTOR
    times what it took up to here)."""
    with stage("validating"):
        result.outputs = validator.check(result.model).outputs
    result.validated, result.validation_runs = True, validator.runs
    if not result.ok and changed and "exclude" in getattr(strategy, "options", ()):
        budget = BISECT_TIME_FACTOR * (time.perf_counter() - start)
        with stage("bisecting"):
            _bisect(result, strategy, original, options, changed, validator, time.perf_counter() + budget)
    if not result.ok:
        relax = sorted({RELAXED_BY[m] for o in result.outputs for m in o.failed if m in RELAXED_BY})
        hint = f" ({', '.join(relax)} relax the tolerance; --inputs validates on your data)" if relax else ""
        raise OutOfToleranceError(f"the {result.strategy} model misses the tolerance ({result.failures()}); "
                                  f"nothing written{hint}\n{result.report()}", result)


def _rate_runs(samples: list[int]) -> int:
    """The input sets per size that give every label output (integer/bool) and every set of class scores (their
    elements or rows in one set per size: ``samples``) at least MIN_RATE_SAMPLES elements or rows to judge a rate
    on (at most MAX_RATE_RUNS; 1 when one run gives enough)."""
    fewest = min((n for n in samples if n), default=MIN_RATE_SAMPLES)
    return min(MAX_RATE_RUNS, max(1, math.ceil(MIN_RATE_SAMPLES / fewest)))


def _bisect(result: CompressResult, strategy: Any, original: onnx.ModelProto, options: dict[str, Any],
            changed: list[str], validator: Validator, deadline: float) -> None:
    """Exclude nodes (smallest failing prefix's last node, repeatedly) until the tolerance is met, in at most
    MAX_BISECT_RUNS strategy runs and until ``deadline`` (``time.perf_counter()``). A run's model is dropped
    before the next is built, unless it passed."""
    excluded: list[str] = list(options.get("exclude") or ())
    candidates = list(changed)
    runs = 0

    def passes(quantized: list[str]) -> tuple[bool, Any]:
        nonlocal runs
        runs += 1
        skip = excluded + [n for n in candidates if n not in quantized]
        model, notes, _ = _run(strategy, original, {**options, "exclude": skip})
        outputs = validator.check(model).outputs
        ok = all(o.ok for o in outputs)
        outcome = (model, notes, outputs) if ok else None
        del model
        release()  # the step's candidate and session are gone: their memory goes back before the next step
        return ok, outcome

    began = time.perf_counter()

    def more() -> bool:
        if runs >= MAX_BISECT_RUNS:
            return False
        now = time.perf_counter()
        step = (now - began) / runs if runs else 0.0  # a step takes about what the steps so far took
        if now + step > deadline:
            log.warning("bisection stopped after %d run(s): its time budget (%.3gx the first compression) is spent",
                        runs, BISECT_TIME_FACTOR)
            return False
        return True

    while candidates and more():
        ok, outcome = passes(candidates)
        if ok:
            result.model, result.notes, result.outputs = outcome
            result.excluded = excluded
            result.census = census(result.model)
            result.file_bytes = (result.file_bytes[0], serialized_size(result.model))
            result.weight_bytes = (result.weight_bytes[0], weight_bytes(result.model))
            return
        low, high = 1, len(candidates)  # the smallest failing prefix length
        while low < high and more():
            middle = (low + high) // 2
            if passes(candidates[:middle])[0]:
                low = middle + 1
            else:
                high = middle
        if low < high:  # the search was cut short: it named no culprit
            break
        culprit = candidates.pop(low - 1)
        excluded.append(culprit)
        log.info("compression of %s breaks the tolerance: left uncompressed", culprit)
    result.excluded = excluded


@dataclass
class _Timed:
    """The original's latency, measured before the strategy ran, and what timing the result needs."""

    baseline: Any
    feed: dict[str, Any]
    ms: float


def _time_original(baseline: Any, inputs: Any, input_shapes: Any, runs: int, threads: int) -> _Timed:
    """The original's latency (min of ``runs``), timed before the strategy runs: its session never shares memory
    with the compressed model."""
    from gsrewrite.pipelines.bench import bench, bench_inputs

    with stage("benchmarking the original"):
        feed = bench_inputs(getattr(baseline, "proto", baseline), inputs, input_shapes)
        ms = bench([("original", baseline)], runs=runs, threads=threads, inputs=feed).timings[0].min_ms
    return _Timed(baseline, feed, ms)


def _bench(result: CompressResult, timed: _Timed, runs: int, threads: int, allow_slower: bool) -> None:
    """Time the result alone (the original was timed alone before: never two sessions at once, which for a large
    model would double the memory the request needs). A result slower than MAX_SLOWDOWN times the original is
    timed again, after the original again (the minima of both measurements count), and refused unless
    ``allow_slower``."""
    from gsrewrite.pipelines.bench import bench

    def alone(label: str, model: Any) -> float:
        return bench([(label, model)], runs=runs, threads=threads, inputs=timed.feed).timings[0].min_ms

    before = timed.ms
    with stage("benchmarking"):
        after = alone(result.strategy, result.model)
        if after > MAX_SLOWDOWN * before and not allow_slower:  # once more before refusing: a noisy moment
            before = min(before, alone("original", timed.baseline))
            after = min(after, alone(result.strategy, result.model))
    result.latency_ms = (before, after)
    if after > MAX_SLOWDOWN * before and not allow_slower:
        raise SlowerModelError(
            f"the {result.strategy} model is slower than its input: {before:.3g} ms -> {after:.3g} ms "
            f"({after / before:.2f}x, more than {MAX_SLOWDOWN:.2f}x; onnxruntime, min of 2 x {runs} runs of each, "
            "one model at a time); nothing written (--allow-slower writes it, --bench-runs 0 skips the measurement)\n"
            + result.report(), result)
