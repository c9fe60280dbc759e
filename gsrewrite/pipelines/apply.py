"""``apply``: load -> canonicalize -> pattern rewrites -> legalize -> validate (bisect on failure).

Every rewrite is checked: onnxruntime runs the original and the result on the same inputs. When they
disagree (or onnxruntime cannot load or run the result), the patterns that matched are bisected
(:mod:`gsrewrite.pipelines.bisect`) to find the guilty one; its rewrites are dropped, the rest is applied again
and re-validated, until the result agrees (at worst: the original model, unchanged). Nothing wrong is ever
returned silently.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from gsrewrite.contracts import CONTRACTS
from gsrewrite.contracts import state as state_contracts
from gsrewrite.engine.canonicalize import canonicalize
from gsrewrite.engine.legalize import legalize
from gsrewrite.engine.rewrite import MatchRecord, PassResult, RewritePass
from gsrewrite.engine.targets import check_device, check_target, device_reason
from gsrewrite.engine.tracing import NearMiss
from gsrewrite.errors import RewriteError, UsageError
from gsrewrite.graph.conversion import to_graph
from gsrewrite.graph.core import default_opset, to_model
from gsrewrite.info import op_histogram
from gsrewrite.patterns.pattern import Pattern
from gsrewrite.patterns.registry import PatternRegistry
from gsrewrite.pipelines.bisect import Candidate, Checker, validate_and_bisect
from gsrewrite.pipelines.kv_contracts import apply_kv_contracts, check_decoder, wanted
from gsrewrite.pipelines.options import ModelArg, RewriteOptions, Source, ValidateArg, validation_kwargs
from gsrewrite.pipelines.request import entered, handed_back, overlapped
from gsrewrite.reporting import Report, rewrite_report
from gsrewrite.request import Request
from gsrewrite.simplifier.result import ModelStats
from gsrewrite.stages import stage

log = logging.getLogger(__name__)



@dataclass
class RewriteResult:
    """What ``apply`` did. ``model`` is always safe to save: validated, or unchanged."""

    model: onnx.ModelProto
    changed: bool
    counts: dict[str, int]
    records: list[MatchRecord] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    near_misses: dict[str, NearMiss] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    #: whether near misses were recorded (``explain``): ``near_misses`` and ``attempts`` then say why not
    explained: bool = False
    dropped: dict[str, str] = field(default_factory=dict)
    validation: Any = None
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    patterns: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: the folder ``model``'s weight references are relative to (a model read weightless: Source.mapped), if any
    weights_dir: str | None = None
    #: ``model`` serialized, when validation serialized it (``save_model(..., serialized=)`` writes these bytes)
    serialized: bytes | None = field(default=None, repr=False)
    #: changes per cleanup pass made before the patterns (``optimize``)
    passes: dict[str, int] = field(default_factory=dict)
    #: the rewrites of the cleanup's pattern passes (``fuse-conv-bn``, ...), with their regions (``optimize``)
    pass_records: list[MatchRecord] = field(default_factory=list)
    #: the model the result is compared with (what the report's "before" column describes)
    original: onnx.ModelProto | None = field(default=None, repr=False)
    #: ``optimize(tune=True)``: the candidates timed and the one kept (a :class:`~gsrewrite.pipelines.tune.TuneResult`)
    tuned: Any = None
    #: ``optimize(compress=...)``: the compression of the fused model (a ``CompressResult``)
    compressed: Any = None
    #: the input contracts the kept rewrites narrow the model to (:mod:`gsrewrite.contracts`; also in its
    #: ``metadata_props``): asked for by the user, empty otherwise
    contracts: list[str] = field(default_factory=list)
    #: the ``genai_config.json`` written for the model (:func:`gsrewrite.save_genai`), once written
    genai: dict[str, Any] | None = None

    def report(self, verbose: bool = False) -> str:
        """A readable report: changed ops, nodes, parameters and size before/after, changes per pass and
        pattern, what was dropped or skipped, the validation verdict."""
        return self.report_blocks(verbose=verbose).text()

    def report_blocks(self, *, verbose: bool = False, size_before: int | None = None,
                      size_after: int | None = None) -> Report:
        """:meth:`report` as blocks (the CLI renders them); sizes in bytes when known (files read/written)."""
        before = ModelStats.of(self.original if self.original is not None else self.model, size_before)
        after = ModelStats.of(self.model, size_after)
        changes = {"Changes per cleanup pass": self.passes, "Rewrites per pattern": self.counts}
        verdict = self.validation.summary() if self.validation is not None else None
        report = rewrite_report(before, after, changes, dropped=self.dropped, skipped=self.skipped, verdict=verdict,
                                verbose=verbose)
        report.blocks += [f"Contract: {name}: the model now accepts {CONTRACTS[name]}" for name in self.contracts]
        if self.genai is not None:
            report.blocks.append(_genai_line(self.genai))
        for step in (self.tuned, self.compressed):
            if step is not None:
                report.blocks += step.report_blocks().blocks
        return report

    def verdicts(self) -> dict[str, str]:
        """Per pattern asked for, what became of it, as ``optimize`` decides: ``applied N`` (validated or not),
        ``dropped: why`` (validation), ``skipped: why`` (device or contract policy, opset, target), or why it
        did not match (the deepest near miss, a match the engine refused) when near misses were recorded."""
        out: dict[str, str] = {}
        for name in self.patterns:
            count = self.counts.get(name, 0)
            if name in self.skipped:
                out[name] = f"skipped: {self.skipped[name]}"
            elif name in self.dropped:
                out[name] = f"dropped by validation: {self.dropped[name]}"
            elif count:
                checked = "validated" if self.validation is not None else "not validated (--validate runs it)"
                out[name] = f"applied {count}, {checked}"
            elif name in self.near_misses:
                out[name] = f"no match: {self.near_misses[name].sentence()}"
            elif self.explained and not self.attempts.get(name):
                out[name] = "no match: no candidate node in the graph"
            else:
                out[name] = "no match"
        return out

    def to_dict(self) -> dict[str, Any]:
        data = {
            "changed": self.changed,
            "counts": dict(self.counts),
            "matches": [r.to_dict() for r in self.records],
            "skipped": dict(self.skipped),
            "dropped": dict(self.dropped),
            "near_misses": {k: v.to_dict() for k, v in self.near_misses.items()},
            "validation": self.validation.to_dict() if self.validation is not None else None,
            "nodes_before": sum(self.before.values()),
            "nodes_after": sum(self.after.values()),
            "ops_before": dict(self.before),
            "ops_after": dict(self.after),
            "patterns": list(self.patterns),
            "passes": dict(self.passes),
            "contracts": {name: CONTRACTS[name] for name in self.contracts},
            "seconds": round(self.seconds, 4),
        }
        if self.genai is not None:
            data["genai_config"] = self.genai
        if self.explained:
            data["verdicts"] = self.verdicts()
        for key, step in (("tune", self.tuned), ("compress", self.compressed)):
            if step is not None:
                data[key] = step.to_dict()
        return data


def _genai_line(config: dict[str, Any]) -> str:
    """The report's line on the ``genai_config.json`` written."""
    search, model = config["search"], config["model"]
    tokens = [f"{key[:-9]} {model[key]}" for key in ("bos_token_id", "eos_token_id", "pad_token_id") if key in model]
    return (f"onnxruntime-genai: context {model['context_length']}, max length {search['max_length']}, past and "
            f"present share one buffer: {'yes' if search['past_present_share_buffer'] else 'no'}, special tokens: "
            f"{', '.join(tokens) or 'none (no --tokenizer)'}")


def apply(
    model: ModelArg,
    patterns: Sequence[str] = ("all",),
    *,
    target: str = "ort",
    device: str = "cpu",
    validate: ValidateArg = True,
    pattern_files: Iterable[str | os.PathLike] = (),
    explain: bool = False,
    opset: int | None = None,
    registry: PatternRegistry | None = None,
) -> RewriteResult:
    """Rewrite ``model`` with the named patterns (``all``, family names, pattern names) for ``target``.

    ``device`` (``cpu`` or ``gpu``) is where the model will run: patterns that pay off on the other kind only
    are skipped (``result.skipped`` says why). ``pattern_files`` adds pattern files on top of the registered
    ones (their patterns are always selected). ``opset`` first converts the model to that opset. With
    ``validate`` (default ``True``; a :class:`~gsrewrite.pipelines.ValidationOptions` sets inputs, shapes,
    tolerances ...) the result is compared with the original in onnxruntime; a pattern whose rewrites fail (or
    that onnxruntime cannot load) is dropped (``result.dropped`` says why). If nothing can be made to agree,
    the result is the original itself. A model given by path is compared with that file as it is. Input contracts
    (narrower inputs for faster fused ops, :mod:`gsrewrite.contracts`) are :class:`RewriteOptions`'
    ``contracts``: :func:`apply_fusions` or ``optimize(rewrite=...)`` take them.
    """
    fusions = Fusions(tuple(patterns), target, device, RewriteOptions(tuple(pattern_files), opset, explain, registry))
    return apply_fusions(model, fusions, validate)


def apply_fusions(model: ModelArg, fusions: Fusions, validate: ValidateArg = True) -> RewriteResult:
    """:func:`apply` with its settings as one :class:`Fusions` (``fusions.options.contracts`` included, checked
    and expanded by :class:`RewriteOptions` itself)."""
    with entered(model, validation_kwargs(validate)) as request:
        check_decoder(request.source.model, fusions.options.contracts)  # KV-cache contracts without a cache
        result = rewrite(request, fusions)
        if wanted(fusions.options.contracts):
            apply_kv_contracts(result, request.source.model, fusions.options.contracts, None,
                               with_contracts(request.options, fusions.options))
            result.after = op_histogram(result.model)
        return handed_back(request, result)


@dataclass(frozen=True)
class Fusions:
    """Which patterns rewrite, for what: the names (``all``, families, patterns), target, device, and the rest."""

    patterns: Sequence[str]
    target: str = "ort"
    device: str = "cpu"
    options: RewriteOptions = field(default_factory=RewriteOptions)


def rewrite(request: Request, fusions: Fusions, *, working: Source | None = None, pending: Any = None,
            graph: gs.Graph | None = None) -> RewriteResult:
    """:func:`apply`'s pipeline on the request's model, validated with ``request.options`` (keyword arguments of
    :func:`gsrewrite.validate`; None: not validated). ``working``: the request's model as an earlier stage left it
    (``optimize``'s cleanup): rewritten instead, while the request's model stays what the result is compared with
    and given back when nothing agrees. ``pending``: the reference's validator when the caller made it (started or
    not: a validator not started starts at the first comparison); without one, the reference run starts at once,
    overlapping the rewrite (a small model), else at the first comparison. ``graph``: the rewritten model as the
    previous stage left it (typed; consumed), taken instead of importing the model again."""
    start = time.perf_counter()
    source = working if working is not None else request.source
    reference = request.source.model if source.model is not request.source.model else None
    original, options, validation = source.model, fusions.options, request.options
    check_target(fusions.target)
    check_device(fusions.device)
    registry, selected = _select(options.registry, fusions.patterns, options.pattern_files)
    named = [p.name for p in selected]  # every pattern asked for, those the policies skip too (explain lists them)
    selected, elsewhere = _for_device(selected, fusions.device)
    selected, narrowing = _within_contracts(selected, fusions.target, options.contracts)
    elsewhere.update(narrowing)
    validation = with_contracts(validation, options)
    validate = validation is not None
    if pending is None and validate:
        pending = reference_validator(source if reference is None else source.derived(reference), validation)
        overlapped(request, pending, likely_to_change=True)  # at once when small: the run overlaps the rewrite
    working = _convert_opset(original, options.opset)
    with stage("rewriting"):
        out, run = _rewrite(working, selected, fusions.target, options.explain, registry,
                            graph if working is original else None)
    result = _result(original, out, run, selected)
    result.skipped.update(elsewhere)
    result.patterns = named
    if reference is not None:
        result.before = op_histogram(reference)
    if validate and (result.changed or reference is not None):
        with stage("validating"):
            _validate(result, reference or original, working, selected, (fusions.target, registry),
                      Checker(pending))
    elif validate:  # nothing to compare, but an original onnxruntime cannot run cannot be validated either
        pending.ensure_runnable()
    else:
        from gsrewrite.validation.runner import warn_unvalidated

        warn_unvalidated(reference or original)
    _state_contracts(result, selected, fusions.target)
    result.after = op_histogram(result.model)
    result.original = reference or original
    result.seconds = time.perf_counter() - start
    return result


def with_contracts(validation: dict[str, Any] | None, options: RewriteOptions) -> dict[str, Any] | None:
    """Validation's keyword arguments with the input contracts the user accepted (their inputs are not tried)."""
    if validation is None or not options.contracts:
        return validation
    return {**validation, "contracts": tuple(options.contracts)}


def _within_contracts(selected: list[Pattern], target: str, contracts: Sequence[str]
                      ) -> tuple[list[Pattern], dict[str, str]]:
    """The selected patterns whose replacement for ``target`` keeps every input the original accepts, or narrows
    it to contracts the user asked for (every one of them); why each other one is skipped."""
    skipped: dict[str, str] = {}
    for pattern in selected:
        missing = [name for name in pattern.narrows.get(target, ()) if name not in contracts]
        if missing:
            skipped[pattern.name] = "narrows the inputs the model accepts: " + "; ".join(
                f"{CONTRACTS[name]} (--contract {name} accepts that)" for name in missing)
    for name, reason in skipped.items():
        log.info("pattern %s skipped: %s", name, reason)
    return [p for p in selected if p.name not in skipped], skipped


def _state_contracts(result: RewriteResult, selected: list[Pattern], target: str) -> None:
    """The contracts the kept rewrites narrow the model to: in the result and the model's metadata_props."""
    result.contracts = sorted({name for p in selected if result.counts.get(p.name)
                               for name in p.narrows.get(target, ())})
    if result.contracts and result.changed:
        state_contracts(result.model, result.contracts)
        result.serialized = None  # the bytes validation made lack the statement


# --- pieces -----------------------------------------------------------------------------------------------
def _select(registry: PatternRegistry | None, names: Sequence[str],
            files: Iterable[str | os.PathLike]) -> tuple[PatternRegistry, list[Pattern]]:
    from gsrewrite.patterns import default_registry

    reg = registry if registry is not None else default_registry()
    from_files = [p for path in files for p in reg.add_file(Path(path), provider=f"--pattern-file {path}")]
    # names select among every registered pattern, the files' too; without names, the files' patterns run
    selected = reg.select(names) if names else from_files
    if not selected:
        raise UsageError("no patterns selected (use --pattern NAME or --pattern-file FILE)")
    reg.verify(selected)
    return reg, selected


def _for_device(selected: list[Pattern], device: str) -> tuple[list[Pattern], dict[str, str]]:
    """The selected patterns that pay off on ``device``, and why each other one is skipped."""
    skipped = {p.name: device_reason(p, device) for p in selected if device not in p.devices}
    for name, reason in skipped.items():
        log.info("pattern %s skipped: %s", name, reason)
    return [p for p in selected if p.name not in skipped], skipped


def _convert_opset(model: onnx.ModelProto, opset: int | None) -> onnx.ModelProto:
    current = default_opset(model)
    if opset is None or opset == current:
        return model
    if opset < current:
        raise UsageError(f"--opset {opset} is lower than the model's opset {current}; gsrewrite only upgrades")
    try:
        from onnx import version_converter

        return version_converter.convert_version(model, opset)
    except Exception as exc:
        raise RewriteError(f"cannot convert the model from opset {current} to {opset}: "
                           f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


def _rewrite(model: onnx.ModelProto, patterns: list[Pattern], target: str, explain: bool,
             registry: PatternRegistry, graph: gs.Graph | None = None) -> tuple[onnx.ModelProto, PassResult]:
    graph = canonicalize(graph if graph is not None else to_graph(model))
    rewrite = RewritePass(patterns, registry.checks, registry.computes, target, explain=explain)
    run = rewrite.run(graph)
    if not run.modified:
        return model, run
    legalize(graph)
    return to_model(graph, model), run


def _result(original: onnx.ModelProto, out: onnx.ModelProto, run: PassResult,
            selected: list[Pattern]) -> RewriteResult:
    modified = run.modified
    result = RewriteResult(
        model=out if modified else original, changed=modified, counts=dict(run.counts), records=run.records,
        skipped=dict(run.skipped), before=op_histogram(original), patterns=[p.name for p in selected],
    )
    if run.tracer is not None:
        result.explained = True
        result.near_misses = dict(run.tracer.best)
        result.attempts = dict(run.tracer.attempts)
    return result


def reference_validator(reference: Source, options: dict[str, Any] | None) -> Any:
    """The reference's validator, not started yet (a LazyValidator: ``start()`` runs it on a worker thread,
    once, however many candidates bisection compares with it)."""
    from gsrewrite.validation.background import LazyValidator

    return LazyValidator(reference.reference(), **(options or {}))


def _validate(result: RewriteResult, reference: onnx.ModelProto, working: onnx.ModelProto,
              selected: list[Pattern], rewriting: tuple[str, PatternRegistry], check: Checker) -> None:
    """Validate against ``reference``; drop guilty patterns until it agrees, else fall back to ``reference``."""
    target, registry = rewriting

    def build(active: list[Pattern]) -> Candidate[PassResult | None]:
        out, run = _rewrite(working, active, target, False, registry)
        return Candidate(out, run.modified, run)

    active = [p for p in selected if result.counts.get(p.name)]
    first: Candidate[PassResult | None] = Candidate(result.model, result.changed, None)
    outcome = validate_and_bisect(first, active, build, check, name=lambda p: p.name, kind="pattern")
    result.dropped.update(outcome.dropped)
    report, run = outcome.report, outcome.candidate.detail
    if run is not None:  # bisection rebuilt the model
        result.model, result.counts, result.records = outcome.candidate.model, dict(run.counts), run.records
    if not report.ok:  # what remains (e.g. an earlier simplification) still disagrees: give back the reference
        log.warning("the result still disagrees with the original (%s): keeping the original", report.summary())
        result.dropped["(preparation)"] = report.summary()
        result.model, result.counts, result.records = reference, {}, []
        report = check(reference)
    result.changed = result.model is not reference
    result.validation = report
    result.serialized = check.serialized(result.model) if report.ok else None
