"""``compress``: run a compression strategy (registered through ``gsrewrite_register_compression_strategies``),
validate the result against the uncompressed model with the strategy's tolerance (cosine similarity and max
error per output, on validation's inputs and sizes), and report sizes, errors and latency.

When the compressed model misses the tolerance and the strategy reports which nodes it changed and accepts
``exclude``, the nodes are bisected: the smallest prefix of them whose compression fails is found, its last
node is excluded, and the strategy runs again, until the result passes (or nothing is left to compress: an
error, nothing written).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite import plugin_hooks
from gsrewrite.errors import UsageError, ValidationError
from gsrewrite.model_io.saving import serialized_size
from gsrewrite.protocols import CompressionStrategy, Tolerance
from gsrewrite.registry import NamedRegistry
from gsrewrite.stages import stage

log = logging.getLogger(__name__)

#: most strategy runs one bisection may take
MAX_BISECT_RUNS = 40


def strategies() -> NamedRegistry[CompressionStrategy]:
    """Every registered strategy (built-in and plugins'), by name."""
    registry: NamedRegistry[CompressionStrategy] = NamedRegistry("compression strategy")
    plugin_hooks.register_compression_strategies(registry)
    return registry


@dataclass
class OutputError:
    name: str
    max_abs: float | None
    cosine: float | None

    def within(self, tolerance: Tolerance) -> bool:
        if self.cosine is None or math.isnan(self.cosine) or self.cosine < tolerance.min_cosine:
            return False
        return tolerance.max_abs is None or (self.max_abs is not None and self.max_abs <= tolerance.max_abs)


@dataclass
class CompressResult:
    model: onnx.ModelProto
    strategy: str
    options: dict[str, Any]
    tolerance: Tolerance
    notes: list[str] = field(default_factory=list)
    file_bytes: tuple[int, int] = (0, 0)
    weight_bytes: tuple[int, int] = (0, 0)
    outputs: list[OutputError] = field(default_factory=list)
    validated: bool = False
    excluded: list[str] = field(default_factory=list)
    latency_ms: tuple[float, float] | None = None

    @property
    def ok(self) -> bool:
        return not self.validated or all(o.within(self.tolerance) for o in self.outputs)

    def report(self) -> str:
        before, after = self.file_bytes
        w_before, w_after = self.weight_bytes
        lines = [f"{self.strategy}: file {_mib(before)} -> {_mib(after)} ({after / before:.3f}x), "
                 f"weights {_mib(w_before)} -> {_mib(w_after)} ({w_after / max(w_before, 1):.3f}x)"]
        lines += [f"  {note}" for note in self.notes]
        if self.excluded:
            lines.append(f"  left uncompressed to meet the tolerance: {', '.join(self.excluded)}")
        if self.validated:
            limit = f"cosine >= {self.tolerance.min_cosine}" + (
                f", max abs <= {self.tolerance.max_abs}" if self.tolerance.max_abs is not None else "")
            lines.append(f"  outputs vs the uncompressed model ({limit}):")
            for o in self.outputs:
                lines.append(f"    {o.name}: cosine {_num(o.cosine, '.6f')}, max abs {_num(o.max_abs, '.3g')}"
                             f"{'' if o.within(self.tolerance) else '  OUT OF TOLERANCE'}")
        else:
            lines.append("  not validated")
        if self.latency_ms is not None:
            a, b = self.latency_ms
            lines.append(f"  latency (onnxruntime, min of interleaved runs): {a:.2f} ms -> {b:.2f} ms "
                         f"({b / a:.3f}x)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "options": self.options, "notes": self.notes, "ok": self.ok,
                "file_bytes": {"before": self.file_bytes[0], "after": self.file_bytes[1],
                               "ratio": round(self.file_bytes[1] / max(self.file_bytes[0], 1), 4)},
                "weight_bytes": {"before": self.weight_bytes[0], "after": self.weight_bytes[1],
                                 "ratio": round(self.weight_bytes[1] / max(self.weight_bytes[0], 1), 4)},
                "tolerance": {"min_cosine": self.tolerance.min_cosine, "max_abs": self.tolerance.max_abs},
                "validated": self.validated, "excluded": self.excluded,
                "outputs": [{"name": o.name, "max_abs": o.max_abs, "cosine": o.cosine,
                             "within_tolerance": o.within(self.tolerance)} for o in self.outputs],
                "latency_ms": None if self.latency_ms is None else
                {"before": round(self.latency_ms[0], 4), "after": round(self.latency_ms[1], 4),
                 "ratio": round(self.latency_ms[1] / self.latency_ms[0], 4)}}


def _mib(n: int) -> str:
    from gsrewrite.reporting import size_text

    return size_text(n)


def _num(value: float | None, fmt: str) -> str:
    return "?" if value is None else format(value, fmt)


def weight_bytes(model: onnx.ModelProto) -> int:
    from gsrewrite.profiling.costs import item_bits

    return sum((math.prod(t.dims) * item_bits(t.data_type) + 7) // 8 for t in model.graph.initializer)


def compress(model: onnx.ModelProto | str, strategy: str, *, validate: bool = True, inputs: Any = None,
             input_shapes: Any = None, min_cosine: float | None = None, max_abs: float | None = None,
             bench_runs: int = 0, bench_threads: int = 1, reference: onnx.ModelProto | None = None,
             **options: Any) -> CompressResult:
    """Compress ``model`` with the strategy called ``strategy`` (``options`` go to it), validate against
    ``reference`` (default: ``model``; ``optimize --compress`` gives the unfused input), report."""
    original = model if isinstance(model, onnx.ModelProto) else _load(model)
    baseline = reference if reference is not None else original
    chosen = strategies().get(strategy)
    tolerance = getattr(chosen, "tolerance", Tolerance())
    if min_cosine is not None or max_abs is not None:
        tolerance = Tolerance(min_cosine if min_cosine is not None else tolerance.min_cosine,
                              max_abs if max_abs is not None else tolerance.max_abs)
    given = {k: v for k, v in options.items() if v is not None}
    if validate:  # a model onnxruntime will not run cannot be compared (nor calibrated): say so before any work
        from gsrewrite.validation.runner import cannot_validate, why_unrunnable

        reason = why_unrunnable(baseline)
        if reason is not None:
            raise cannot_validate(reason)
    with stage(f"compressing ({strategy})"):
        compressed, notes, changed = _run(chosen, original, given)
    result = CompressResult(compressed, strategy, given, tolerance, notes)
    result.file_bytes = (serialized_size(original), serialized_size(compressed))
    result.weight_bytes = (weight_bytes(original), weight_bytes(compressed))
    if validate:
        with stage("validating"):
            result.outputs = _errors(baseline, compressed, inputs, input_shapes)
        result.validated = True
        if not result.ok and changed and "exclude" in getattr(chosen, "options", ()):
            with stage("bisecting"):
                _bisect(result, chosen, original, baseline, given, changed, inputs, input_shapes)
        if not result.ok:
            raise ValidationError(f"the {strategy} model misses the tolerance; nothing written\n{result.report()}")
    if bench_runs:
        from gsrewrite.pipelines.bench import bench, bench_inputs

        with stage("benchmarking"):
            feed = bench_inputs(baseline, inputs, input_shapes)
            timed = bench([("original", baseline), (strategy, result.model)], runs=bench_runs,
                          threads=bench_threads, inputs=feed)
        result.latency_ms = (timed.timings[0].min_ms, timed.timings[1].min_ms)
    return result


def _load(path: str) -> onnx.ModelProto:
    from gsrewrite.model_io import load_model

    return load_model(path)


def _run(strategy: Any, model: onnx.ModelProto, options: dict[str, Any]
         ) -> tuple[onnx.ModelProto, list[str], list[str]]:
    answer = strategy.apply(model, **options)
    if isinstance(answer, onnx.ModelProto):
        return answer, [], []
    if not isinstance(getattr(answer, "model", None), onnx.ModelProto):
        raise UsageError(f"compression strategy {strategy.name!r} returned {type(answer).__name__}, not a model")
    return answer.model, list(getattr(answer, "notes", [])), list(getattr(answer, "quantized_nodes", []))


def _errors(original: onnx.ModelProto, compressed: onnx.ModelProto, inputs: Any, input_shapes: Any
            ) -> list[OutputError]:
    from gsrewrite.validation import validate

    report = validate(original, compressed, inputs=inputs, input_shapes=input_shapes, atol=1e30, rtol=1e30)
    return [OutputError(o.name, o.max_abs, o.cosine) for o in report.outputs]


def _bisect(result: CompressResult, strategy: Any, original: onnx.ModelProto, baseline: onnx.ModelProto,
            options: dict[str, Any], changed: list[str], inputs: Any, input_shapes: Any) -> None:
    """Exclude nodes (smallest failing prefix's last node, repeatedly) until the tolerance is met."""
    excluded: list[str] = list(options.get("exclude") or ())
    candidates = list(changed)
    runs = 0

    def passes(quantized: list[str]) -> tuple[bool, Any]:
        nonlocal runs
        runs += 1
        skip = excluded + [n for n in candidates if n not in quantized]
        model, notes, _ = _run(strategy, original, {**options, "exclude": skip})
        errors = _errors(baseline, model, inputs, input_shapes)
        return all(e.within(result.tolerance) for e in errors), (model, notes, errors)

    while candidates and runs < MAX_BISECT_RUNS:
        ok, outcome = passes(candidates)
        if ok:
            result.model, result.notes, result.outputs = outcome
            result.excluded = excluded
            result.file_bytes = (result.file_bytes[0], serialized_size(result.model))
            result.weight_bytes = (result.weight_bytes[0], weight_bytes(result.model))
            return
        low, high = 1, len(candidates)  # the smallest failing prefix length
        while low < high and runs < MAX_BISECT_RUNS:
            middle = (low + high) // 2
            if passes(candidates[:middle])[0]:
                low = middle + 1
            else:
                high = middle
        culprit = candidates.pop(low - 1)
        excluded.append(culprit)
        log.info("compression of %s breaks the tolerance: left uncompressed", culprit)
    result.excluded = excluded
