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
beyond the measurement's own noise (unless ``allow_slower``).

Latency (``bench_runs`` > 0) is measured where the model is for: a decoder with a KV cache at a decode step (1 token
over a past of 128) and a prefill (128 tokens), as ``gsrewrite bench`` does, and judged on the decode step; other
models on validation's sample inputs. One model's session at a time: the original before the strategy runs, then
the result; a result that looks slower is timed again after the original again (two blocks each), and refused only
when its best run is more than ``MAX_SLOWDOWN`` x (1 + the noise) times the original's, the noise being how far the
best run of the same model moved between its blocks (:func:`slower_beyond_noise`). When the strategy takes an
``accuracy_level`` the user did not give and its result holds MatMulNBits, levels 0 and 4 (int8 activations) are
timed side by side and the faster kept (:func:`choose_accuracy_level`), before validation, also when no latency
was asked for (``LEVEL_RUNS`` runs each: the level decides most of an int4 decoder's decode speed).
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
from gsrewrite.model_io.source import Source
from gsrewrite.model_io.tensors import initializer_bytes
from gsrewrite.model_io.weights import has_references, materialized
from gsrewrite.pipelines.bisect import first_failing
from gsrewrite.pipelines.compressed_graph import Census, census, same_weights
from gsrewrite.pipelines.options import TOLERANCE_FIELDS
from gsrewrite.pipelines.request import entered, handed_back
from gsrewrite.protocols import CompressionStrategy, Tolerance
from gsrewrite.registry import NamedRegistry
from gsrewrite.reporting import Report, Table, size_text
from gsrewrite.stages import release_memory, stage
from gsrewrite.validation.criteria import Criterion
from gsrewrite.validation.report import LISTED_FAILURES, OutputComparison, describe_failures
from gsrewrite.validation.run_limits import time_limited_runs

if TYPE_CHECKING:
    from gsrewrite.pipelines.bench import Phase
    from gsrewrite.validation import Validator


log = logging.getLogger(__name__)

#: most strategy runs one bisection may take
MAX_BISECT_RUNS = 40
#: a compressed model whose latency is more than this times its input's, beyond the measurement's noise, is refused
#: (unless allow_slower)
MAX_SLOWDOWN = 1.10
#: accuracy_level candidates timed for a MatMulNBits result (0: onnxruntime's default; 4: int8 activations)
ACCURACY_LEVELS = (0, 4)
#: interleaved runs per level when the user asked for no latency (``bench_runs=0``, ``optimize --compress``)
LEVEL_RUNS = 5
#: two levels whose decode steps differ by less than this share are equal there: the prefill decides
EQUAL_SHARE = 0.05
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
    #: the latency of each phase timed (a decoder: ``decode``, judged, and ``prefill``; others: ``run``), ms
    latency_phases: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: how far the best run of the same model moved between its timed blocks (0 with one block each)
    latency_noise: float = 0.0
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
        """``label: 80% agree (400 of 500), need >= 99%; y: ...``: the outputs out of tolerance and why (the first
        :data:`~gsrewrite.validation.report.LISTED_FAILURES`, the rest counted: one line stays readable)."""
        failed = [o for o in self.outputs if not o.ok]
        text = "; ".join(describe_failures(o, self.criterion) for o in failed[:LISTED_FAILURES])
        return text + (f"; and {len(failed) - LISTED_FAILURES} more output(s)" if len(failed) > LISTED_FAILURES
                       else "")

    def report_blocks(self) -> Report:
        """Sizes (and latency) before/after, the strategy's notes, what the output graph holds, each output against
        the uncompressed model: report blocks, as every command's (:mod:`gsrewrite.reporting`)."""
        rows = [_ratio_row("file", *self.file_bytes, size_text), _ratio_row("weights", *self.weight_bytes, size_text)]
        if self.latency_phases:
            for phase, (before, after) in self.latency_phases.items():
                rows.append(_ratio_row(f"latency, {PHASE_TEXT.get(phase, phase)} (onnxruntime, min)", before, after,
                                       lambda ms: f"{ms:.2f} ms"))
        elif self.latency_ms is not None:
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
                 "ratio": round(self.latency_ms[1] / self.latency_ms[0], 4)},
                "latency_phases": {name: {"before": round(b, 4), "after": round(a, 4), "ratio": round(a / b, 4)}
                                   for name, (b, a) in self.latency_phases.items()},
                "latency_noise": round(self.latency_noise, 4)}


#: how the report names each timed phase
PHASE_TEXT = {"decode": "decode step (1 token, past 128)", "prefill": "prefill (128 tokens)",
              "run": "sample inputs"}


def _ratio_row(label: str, before: float, after: float, unit: Callable[[float], str]) -> tuple[str, ...]:
    return (label, unit(before), unit(after), f"{after / before:.3f}x" if before else "")


def weight_bytes(model: onnx.ModelProto) -> int:
    """The declared bytes of the model's initializers (:func:`~gsrewrite.model_io.tensors.initializer_bytes`)."""
    return initializer_bytes(model)


def compress(model: onnx.ModelProto | str | Source, strategy: str, *, validate: bool = True, inputs: Any = None,
             input_shapes: Any = None, min_cosine: float | None = None, max_abs: float | None = None,
             min_agreement: float | None = None, min_top1: float | None = None, bench_runs: int = 0,
             bench_threads: int = 1, allow_slower: bool = False, reference: onnx.ModelProto | None = None,
             contracts: Sequence[str] | None = None, **options: Any) -> CompressResult:
    """Compress ``model`` with the strategy called ``strategy`` (``options`` go to it), validate against
    ``reference`` (default: ``model``; ``optimize --compress`` gives the unfused input) with the strategy's
    tolerance (``min_cosine``, ``max_abs``, ``min_agreement``, ``min_top1`` replace its values), time both when
    ``bench_runs`` > 0 (one model at a time), report. ``contracts``: the input contracts ``model`` was fused under
    (``optimize --contract``): validation tries only the inputs they keep, as the fusions' did; None: those the
    model's ``metadata_props`` state (a model gsrewrite rewrote under them).

    ``model`` may be a :class:`~gsrewrite.model_io.source.Source` read with its weights left in their files
    (``Source.mapped``): a strategy that reads weights one at a time (``reads_references = True``: int4, int8,
    dynamic-int8) never holds them all, onnxruntime maps them, and the result keeps references to the weights it
    did not change (``result.weights_dir``: save with it). Other strategies get the weights read in first.

    Raises :class:`~gsrewrite.errors.NothingToCompressError` when the strategy changed no weight,
    :class:`~gsrewrite.errors.OutOfToleranceError` when the result misses the tolerance (after bisection),
    :class:`~gsrewrite.errors.SlowerModelError` when it was measured more than ``MAX_SLOWDOWN`` times slower than
    the input and ``allow_slower`` is false; each carries the ``CompressResult`` as ``result``.
    """
    with entered(model) as request:
        if contracts is None:  # a model gsrewrite rewrote under contracts states them
            from gsrewrite.contracts import stated

            contracts = stated(request.source.model)
        result = _compress(request.source, strategy, validate, inputs, input_shapes,
                           {"min_cosine": min_cosine, "max_abs": max_abs, "min_agreement": min_agreement,
                            "min_top1": min_top1}, bench_runs, bench_threads, allow_slower, reference, options,
                           tuple(contracts))
        return handed_back(request, result, only_with_references=True)


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

        reason = why_unrunnable(baseline.model if isinstance(baseline, Source) else baseline)
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
    after: dict[str, PhaseTimes] | None = None
    level: int | None = None
    if "accuracy_level" in getattr(chosen, "options", ()) and "accuracy_level" not in given \
            and any(n.op_type == "MatMulNBits" for n in compressed.graph.node):
        # measured whether or not the user asked for latency: the level is most of int4's decode speed (issue 33)
        with stage("benchmarking accuracy levels"):
            levels_timed = timed if timed is not None else _phases_of(baseline, inputs, input_shapes)
            level, measured, note = choose_accuracy_level(compressed, levels_timed, bench_runs or LEVEL_RUNS,
                                                          bench_threads)
        after = measured if timed is not None else None
        result.notes.append(note)
        if level:
            result.model = compressed = with_accuracy_level(compressed, level)
    result.file_bytes = (serialized_size(original), serialized_size(compressed))
    result.weight_bytes = (weight_bytes(original), weight_bytes(compressed))
    result.census = census(compressed)
    if result.weight_bytes[1] >= result.weight_bytes[0] and same_weights(given_model, compressed):
        why = "; ".join(notes) or "the strategy left every weight as it was"
        raise NothingToCompressError(f"nothing to compress: {strategy} changed no weight of the model ({why}); "
                                     "nothing written", result)
    if validator is not None:
        _validate(result, chosen, given_model, given, changed, validator, start,
                  None if not level else lambda model: with_accuracy_level(model, level))
    if timed is not None:
        _bench(result, timed, bench_runs, bench_threads, allow_slower, after)
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
    return Validator(baseline, input_shapes=input_shapes, runs=runs, criterion=criterion, contracts=contracts)


def _load(path: str) -> onnx.ModelProto:
    from gsrewrite.model_io import load_model

    return load_model(path)


def with_accuracy_level(model: onnx.ModelProto, level: int) -> onnx.ModelProto:
    """``model`` with every MatMulNBits node's ``accuracy_level`` set to ``level`` (a copy)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.op_type == "MatMulNBits" and node.domain == "com.microsoft":
            kept = [a for a in node.attribute if a.name != "accuracy_level"]
            del node.attribute[:]
            node.attribute.extend(kept)
            if level:
                node.attribute.append(onnx.helper.make_attribute("accuracy_level", level))
    return copy


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
              changed: list[str], validator: Validator, start: float,
              finish: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None) -> None:
    """Compare with the original's outputs (computed once), bisect when the strategy allows it, or raise.
    ``start``: when the compression began, its reference run included (a bisection may take BISECT_TIME_FACTOR
    times what it took up to here); ``finish``: what was done to the strategy's result before validation (the
    accuracy level chosen), done to each bisection step's too."""
    with stage("validating"):
        result.outputs = validator.check(result.model).outputs
    release_memory()  # the candidate's session, before the save: BERT-base dynamic-int8, --bench-runs 0: 394 -> 337 MiB
    result.validated, result.validation_runs = True, validator.runs
    if not result.ok and changed and "exclude" in getattr(strategy, "options", ()):
        budget = BISECT_TIME_FACTOR * (time.perf_counter() - start)
        with stage("bisecting"):
            _bisect(result, strategy, original, options, changed, validator, time.perf_counter() + budget, finish)
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
            changed: list[str], validator: Validator, deadline: float,
            finish: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None) -> None:
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
        if finish is not None:
            model = finish(model)
        outputs = validator.check(model).outputs
        ok = all(o.ok for o in outputs)
        outcome = (model, notes, outputs) if ok else None
        del model
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
        index = first_failing(candidates, lambda prefix: not passes(prefix)[0], more)
        if index is None:  # the search was cut short: it named no culprit
            break
        culprit = candidates.pop(index)
        excluded.append(culprit)
        log.info("compression of %s breaks the tolerance: left uncompressed", culprit)
    result.excluded = excluded


@dataclass
class PhaseTimes:
    """One model's timed blocks of one phase: each block the run seconds of one session's timed runs."""

    blocks: list[list[float]] = field(default_factory=list)

    @property
    def best(self) -> float:
        """The best run (seconds)."""
        return min(min(block) for block in self.blocks if block)

    @property
    def spread(self) -> float:
        """How far the best run moved between blocks: the largest block minimum over the smallest, minus 1 (0 with
        one block): the noise of the machine at the time, measured on the model itself."""
        minima = [min(block) for block in self.blocks if block]
        return max(minima) / min(minima) - 1.0 if len(minima) > 1 else 0.0


def slower_beyond_noise(before: PhaseTimes, after: PhaseTimes, limit: float = MAX_SLOWDOWN) -> bool:
    """Whether ``after`` is slower than ``before`` by more than ``limit``, beyond the measurement's noise: its best
    run over the original's best run exceeds ``limit`` x (1 + the larger spread of the two). A busy machine that
    moves the same model's best run by 20% between two blocks cannot show a 1.15x slowdown; a 9x one shows."""
    return after.best / before.best > limit * (1.0 + max(before.spread, after.spread))


@dataclass
class _Timed:
    """The original's latency, measured before the strategy ran, per phase, and what timing the result needs."""

    baseline: Any
    phases: list[Phase]
    before: dict[str, PhaseTimes]

    @property
    def judged(self) -> str:
        """The phase the verdict is on: a decoder's decode step (what it runs most), else the one run."""
        return self.phases[0].name


def _time_original(baseline: Any, inputs: Any, input_shapes: Any, runs: int, threads: int) -> _Timed:
    """The original's latency per phase (a decoder's decode step and prefill, else one run on validation's sample
    inputs), timed before the strategy runs: its session never shares memory with the compressed model."""
    with stage("benchmarking the original"):
        timed = _phases_of(baseline, inputs, input_shapes)
        _time_block(timed.before, [("original", baseline)], timed.phases, runs, threads)
    return timed


def _phases_of(baseline: Any, inputs: Any, input_shapes: Any) -> _Timed:
    """The phases latency is measured on (a decoder's decode step and prefill, else one run on validation's sample
    inputs), nothing timed yet."""
    from gsrewrite.pipelines.bench import Phase, bench_inputs
    from gsrewrite.validation import phases as decoder

    proto = baseline.model if isinstance(baseline, Source) else baseline
    phases = decoder.decoder_phases(proto, input_shapes) if inputs is None else None
    if phases is None:
        phases = [Phase("run", bench_inputs(proto, inputs, input_shapes), 0, 0)]
    return _Timed(baseline, phases, {p.name: PhaseTimes() for p in phases})


def _time_block(into: dict[str, PhaseTimes], models: Sequence[tuple[str, Any]], phases: list[Phase], runs: int,
                threads: int) -> list[dict[str, list[float]]]:
    """Time ``models`` (interleaved, their sessions open together) on every phase; the first model's runs become a
    block of ``into``; returns every model's run seconds per phase."""
    from gsrewrite.pipelines.bench import bench_phases

    results = bench_phases(models, phases, runs=runs, threads=threads)
    per_model = [{phase.name: list(result.timings[i].times) for phase, result in zip(phases, results, strict=True)}
                 for i in range(len(models))]
    for name, times in per_model[0].items():
        into[name].blocks.append(times)
    return per_model


def choose_accuracy_level(model: onnx.ModelProto, timed: _Timed, runs: int, threads: int
                          ) -> tuple[int, dict[str, PhaseTimes], str]:
    """Time ``model`` (MatMulNBits without an ``accuracy_level``) at each of ACCURACY_LEVELS, side by side on the
    original's phases, and keep the faster: the decode step decides (a decoder runs it most), the prefill when
    the decode steps are within EQUAL_SHARE of each other; a tie keeps 0 (onnxruntime's default). Level 4
    computes with int8 activations: faster where the CPU has int8 dot products, slower where it has not. Returns
    the level, the kept level's timings (the result's first block) and a note with the numbers."""
    variants = [(f"accuracy_level {level}", model if not level else with_accuracy_level(model, level))
                for level in ACCURACY_LEVELS]
    per_model = _time_block({p.name: PhaseTimes() for p in timed.phases}, variants, timed.phases, runs, threads)
    del variants
    best = {name: [min(times[name]) for times in per_model] for name in per_model[0]}
    order = [timed.judged] + [name for name in best if name != timed.judged]
    chosen = 0
    for name in order:
        low, high = min(best[name]), max(best[name])
        if high - low > EQUAL_SHARE * high:
            chosen = best[name].index(low)
            break
    level = ACCURACY_LEVELS[chosen]
    shown = "; ".join(f"{name} " + " vs ".join(f"{ms * 1000:.3g} ms at {lvl}" for lvl, ms in
                                                zip(ACCURACY_LEVELS, best[name], strict=True)) for name in order)
    note = (f"MatMulNBits accuracy_level {level} (measured: {shown}; "
            f"{'int8 activations' if level == 4 else 'float activations'}, the faster kept)")
    log.info("%s", note)
    return level, {name: PhaseTimes([times]) for name, times in per_model[chosen].items()}, note


def _bench(result: CompressResult, timed: _Timed, runs: int, threads: int, allow_slower: bool,
           after: dict[str, PhaseTimes] | None = None) -> None:
    """Time the result alone (the original was timed alone before: never the original's session beside the
    result's, which for a large model would double the memory the request needs), unless ``after`` holds its
    timings already. A result more than MAX_SLOWDOWN times slower on the judged phase is timed again, after the
    original again (two blocks each), and refused unless ``allow_slower`` when it is slower beyond the noise
    (:func:`slower_beyond_noise`)."""
    judged = timed.judged
    with stage("benchmarking"):
        if after is None:
            after = {p.name: PhaseTimes() for p in timed.phases}
            _time_block(after, [(result.strategy, result.model)], timed.phases, runs, threads)
        if after[judged].best > MAX_SLOWDOWN * timed.before[judged].best and not allow_slower:
            _time_block(timed.before, [("original", timed.baseline)], timed.phases, runs, threads)
            _time_block(after, [(result.strategy, result.model)], timed.phases, runs, threads)
    release_memory()  # the benchmark's sessions, before the save: BERT-base dynamic-int8's peak 406 -> 357 MiB
    before_t, after_t = timed.before[judged], after[judged]
    result.latency_phases = {name: (timed.before[name].best * 1000, after[name].best * 1000) for name in after}
    result.latency_ms = result.latency_phases[judged]
    result.latency_noise = max(before_t.spread, after_t.spread)
    ratio = after_t.best / before_t.best
    for name in result.latency_phases:
        if name != judged and slower_beyond_noise(timed.before[name], after[name]):
            result.notes.append(f"the {name} is slower than the input's ({result.latency_phases[name][0]:.3g} ms -> "
                                f"{result.latency_phases[name][1]:.3g} ms); the verdict is on the {judged}")
    if ratio <= MAX_SLOWDOWN:
        return
    blocks = len(after_t.blocks)
    if not slower_beyond_noise(before_t, after_t) or allow_slower:
        if not allow_slower:
            result.notes.append(f"latency {ratio:.2f}x the input's on the {judged}, within the measurement's noise "
                                f"({result.latency_noise:.0%} between {blocks} blocks of each model): written")
        return
    before, after_ms = result.latency_ms
    raise SlowerModelError(
        f"the {result.strategy} model is slower than its input: {before:.3g} ms -> {after_ms:.3g} ms "
        f"({ratio:.2f}x, more than {MAX_SLOWDOWN:.2f}x beyond the noise of {result.latency_noise:.0%}; "
        f"{PHASE_TEXT.get(judged, judged)}, onnxruntime, min of {blocks} x {runs} runs of each, one model at a time); "
        "nothing written (--allow-slower writes it, --bench-runs 0 skips the measurement)\n" + result.report(), result)
