"""The HTML report of a result (``--report FILE.html``; ``gsrewrite.write_report(result, path)``): the pipelines'
results turned into a :class:`~gsrewrite.report.record.ReportRecord`, which :mod:`gsrewrite.report.html` renders.

Regions come from the rewrites themselves (the engine takes each match down before replacing it: the match
records' ``region``); the rest from the result: what was dropped, skipped or nearly matched (near misses when
``explain`` was on: the CLI's ``--report`` turns it on), the models' costs before and after
(:mod:`gsrewrite.pipelines.report_costs`), validation per input size set, the compression's tolerance and
outputs, the latencies measured.
"""

from __future__ import annotations

import os
from typing import Any

import onnx

from gsrewrite._version import __version__
from gsrewrite.contracts import CONTRACTS
from gsrewrite.report.collect import group_records
from gsrewrite.report.record import (
    Compression,
    Latency,
    Miss,
    OutputRow,
    RegionGroup,
    ReportRecord,
    SizeSet,
    Validation,
)

#: skipped folds listed (the rest counted)
MAX_FOLDS = 50
#: the validation tolerances when none is given (ValidationOptions' defaults)
DEFAULT_RULE = (1e-4, 1e-3)


def report_data(result: Any, *, model: str | os.PathLike[str] | None = None, output: str | None = None,
                command: str | None = None, size_before: int | None = None, size_after: int | None = None,
                original: onnx.ModelProto | None = None) -> ReportRecord:
    """The report of ``result`` (what ``apply``, ``optimize``, ``simplify`` or ``compress`` returned): ``model``
    and ``output`` name the files (shown), sizes are their bytes when known; ``original``: the model before, for a
    result that does not hold it (``compress``; read weightless from ``model`` otherwise)."""
    from gsrewrite.pipelines.report_costs import costs

    kind = command or _command(result)
    record = ReportRecord(kind, os.fspath(model) if model is not None else "(in memory)", output, __version__)
    record.groups = _groups(result)
    record.misses, explained = _misses(result)
    if not explained:
        record.notes.append("near misses were not recorded: run with --report (or explain=True) to see why each "
                            "pattern that did not fire stopped")
    before = original if original is not None else getattr(result, "original", None)
    if before is None and model is not None:
        from gsrewrite.model_io.weightless import load_weightless

        before = load_weightless(model)
    if before is not None:
        found = costs(before, result.model, size_before, size_after)
        record.metrics, record.ops, record.sizes = found.metrics, found.ops, found.sizes
        record.notes += found.notes
    record.validation = _validation(getattr(result, "validation", None))
    compressed = result if hasattr(result, "strategy") else getattr(result, "compressed", None)
    if compressed is not None:
        record.compression = _compression(compressed)
    record.latency = _latency(result, compressed)
    record.contracts = [(name, CONTRACTS.get(name, "")) for name in getattr(result, "contracts", None) or ()]
    record.summary = _summary(record, getattr(result, "seconds", None))
    return record


def write_report(result: Any, path: str | os.PathLike[str], **context: Any) -> int:
    """Write ``result``'s HTML report to ``path`` (atomically; ``context``: :func:`report_data`'s keywords);
    returns the bytes written."""
    from gsrewrite.report.html import write
    from gsrewrite.stages import stage

    with stage("writing the report"):
        return write(report_data(result, **context), path)


def _command(result: Any) -> str:
    if hasattr(result, "strategy"):
        return "compress"
    if hasattr(result, "rounds"):
        return "simplify"
    return "optimize" if getattr(result, "passes", None) or getattr(result, "pass_records", None) else "apply"


def _groups(result: Any) -> list[RegionGroup]:
    if hasattr(result, "rounds"):  # simplify: its pattern passes
        return group_records(getattr(result, "records", []), "cleanup")
    return [*group_records(getattr(result, "pass_records", []), "cleanup"),
            *group_records(getattr(result, "records", []), "fusion")]


def _misses(result: Any) -> tuple[list[Miss], bool]:
    """The misses, and whether the near misses were recorded."""
    misses = [Miss(name, "dropped", why) for name, why in getattr(result, "dropped", {}).items()]
    skipped = getattr(result, "skipped", {})
    misses += [Miss(name, "skipped", why) for name, why in skipped.items()]
    near = getattr(result, "near_misses", {})
    attempts = getattr(result, "attempts", {})
    explained = getattr(result, "explained", True)
    counts = getattr(result, "counts", {})
    for name in getattr(result, "patterns", []) if hasattr(result, "near_misses") else []:
        if counts.get(name) or name in skipped or name in getattr(result, "dropped", {}):
            continue
        if name in near:
            miss = near[name]
            where = f"at template node {miss.template_node!r}" if miss.template_node else "after a full match"
            node = f" (graph node {miss.graph_node!r})" if miss.graph_node else ""
            misses.append(Miss(name, "near miss", f"{where}{node} from anchor {miss.anchor!r}: {miss.reason}",
                               miss.depth, miss.size))
        elif explained and not attempts.get(name):
            misses.append(Miss(name, "no candidate", "no node of the op the pattern starts from"))
    folds = list(getattr(result, "skipped_folds", {}).items())
    misses += [Miss(name, "not folded", why) for name, why in folds[:MAX_FOLDS]]
    compressed = result if hasattr(result, "strategy") else getattr(result, "compressed", None)
    misses += [Miss(name, "left uncompressed", "its compression breaks the tolerance")
               for name in getattr(compressed, "excluded", [])]
    return misses, explained


def _validation(report: Any) -> Validation | None:
    if report is None:
        return None
    if not hasattr(report, "per_run"):  # onnxruntime refused the candidate (bisect.Rejected)
        return Validation(report.summary(), False, "", "onnxruntime could not run the result")
    atol, rtol = report.atol, report.rtol
    given = (atol, rtol) != DEFAULT_RULE or (report.criterion is not None and not report.criterion.elementwise)
    source = "as given" if given else "gsrewrite's default tolerances (--atol, --rtol change them)"
    validation = Validation(report.summary(), report.ok, report.rule, source, report.runs, atol)
    validation.size_sets = [_size_set(report, s) for s in report.sizes]
    validation.outputs = [_row(o) for o in report.outputs]
    return validation


def _size_set(report: Any, size: dict[str, Any]) -> SizeSet:
    name = size.get("name", "")
    runs = [c for c in report.per_run if c.size_set == name]
    floats = [c for c in runs if c.max_abs is not None and not c.exact]
    worst = max(floats, key=lambda c: c.max_abs) if floats else None
    cosines = [c.cosine for c in runs if c.cosine is not None]
    shapes = ", ".join(f"{k} {'x'.join(map(str, v)) or 'scalar'}" for k, v in size.get("shapes", {}).items())
    failed = tuple(dict.fromkeys(f for c in runs for f in c.failed))
    return SizeSet(name, shapes, all(c.ok for c in runs), worst.name if worst else None,
                   worst.max_abs if worst else None, min(cosines) if cosines else None, failed)


def _row(comparison: Any) -> OutputRow:
    return OutputRow(comparison.name, comparison.describe(), comparison.ok, comparison.max_abs, comparison.cosine,
                     tuple(comparison.failed))


def _compression(result: Any) -> Compression:
    from gsrewrite.pipelines.compress import strategies, tolerance_of

    try:
        own = tolerance_of(strategies().get(result.strategy))
    except Exception:  # a strategy no longer registered: its tolerance cannot be told apart
        own = None
    source = f"the {result.strategy} strategy's tolerance" if own == result.tolerance else \
        f"the {result.strategy} strategy's tolerance, with the values given"
    if not result.validated:
        source += "; not validated"
    compression = Compression(result.strategy, result.criterion.describe(), source, result.ok,
                              [_row(o) for o in result.outputs], list(result.notes))
    compression.graph = result.census.text() if result.census is not None else ""
    return compression


def _latency(result: Any, compressed: Any) -> list[Latency]:
    rows = []
    tuned = getattr(result, "tuned", None)
    if tuned is not None:
        rows += [Latency(f"tune: {label}", ms, "kept" if label == tuned.kept else "")
                 for label, ms in tuned.timings.items()]
    if compressed is not None and compressed.latency_ms is not None:
        before, after = compressed.latency_ms
        rows += [Latency("before compression", before), Latency(f"after {compressed.strategy}", after)]
    return rows


def _summary(record: ReportRecord, seconds: float | None) -> list[str]:
    rewrites = sum(g.count for g in record.groups)
    patterns = len({g.region.pattern for g in record.groups})
    lines = [f"{rewrites} rewrite(s) by {patterns} pattern(s) and pass(es); "
             f"{sum(1 for m in record.misses if m.kind == 'dropped')} dropped by validation"]
    if record.validation is not None:
        lines.append(f"Validation: {record.validation.verdict}")
    if record.compression is not None:
        lines.append(f"Compression {record.compression.strategy}: {'within' if record.compression.ok else 'OUT OF'} "
                     f"tolerance ({record.compression.rule})")
    for name, meaning in record.contracts:
        lines.append(f"Input contract {name} (accepted by request; stated in the model's metadata_props): {meaning}")
    if seconds:
        lines.append(f"{seconds:.2f} s")
    return lines
