"""``simplify``: load -> fix input shapes -> passes to a fixed point -> export -> validate (bisect on failure).

The result is compared with the original in onnxruntime; when they disagree (or onnxruntime cannot load or run
the result) the guilty pass is found and dropped (:mod:`gsrewrite.pipelines.bisect`), at worst the original
model comes back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from gsrewrite.errors import UsageError
from gsrewrite.graph.conversion import import_graph
from gsrewrite.graph.core import is_sorted, to_model, toposort
from gsrewrite.graph.fold import DEFAULT_MAX_BYTES
from gsrewrite.pipelines.bisect import Candidate, Checker, validate_and_bisect
from gsrewrite.pipelines.options import ModelArg, ValidateArg, validation_kwargs
from gsrewrite.pipelines.request import entered, handed_back, overlapped
from gsrewrite.protocols import GraphPass
from gsrewrite.request import Request, current
from gsrewrite.simplifier.driver import CONSTANT_NODES, MAX_ROUNDS, run_to_fixed_point
from gsrewrite.simplifier.interface import ShapeSpec, restore_interface, with_input_shapes
from gsrewrite.simplifier.passes.base import SimplifyOptions
from gsrewrite.simplifier.passes.fold_constants import skipped_folds
from gsrewrite.simplifier.registry import PassRegistry, default_pass_registry
from gsrewrite.simplifier.result import SimplifyResult
from gsrewrite.stages import stage

log = logging.getLogger(__name__)

#: What one build of the passes reports besides the model: (changes per pass, rounds run, the pattern passes' match
#: records)
Changes = tuple[dict[str, int], int, list[Any]]


@dataclass(frozen=True)
class SimplifyLimits:
    """Bounds of one simplification: the largest tensor constant folding may create, and the rounds of passes
    run to reach a fixed point."""

    max_fold_bytes: int = DEFAULT_MAX_BYTES
    max_rounds: int = MAX_ROUNDS

    def __post_init__(self) -> None:
        if self.max_fold_bytes < 0 or self.max_rounds < 1:
            raise UsageError("max_fold_bytes must be >= 0 and max_rounds >= 1")


def simplify(
    model: ModelArg,
    *,
    only: Sequence[str] | None = None,
    skip: Sequence[str] | None = None,
    input_shapes: ShapeSpec | None = None,
    downcast: bool = False,
    validate: ValidateArg = True,
    keep_metadata: bool = False,
    registry: PassRegistry | None = None,
    limits: SimplifyLimits | None = None,
) -> SimplifyResult:
    """Simplify ``model`` (a ModelProto or a path) with the registered passes; the input is not modified.

    ``only`` runs just the named passes, ``skip`` leaves some out, ``downcast`` adds the opt-in ``downcast``
    pass. ``input_shapes`` fixes input shapes or dim sizes first (``{"input_ids": (1, 128)}``, ``{"batch": 1}``).
    With ``validate`` (default ``True``; a :class:`~gsrewrite.pipelines.ValidationOptions` sets inputs,
    tolerances ...) the result is compared with the original in onnxruntime; a pass whose rewrites change the
    outputs, or whose result onnxruntime cannot load, is dropped. Exporter debug metadata on nodes, the graph
    and its inputs/outputs is dropped unless ``keep_metadata``. ``limits`` caps one folded tensor and the rounds.
    """
    start = time.perf_counter()
    settings = Settings(only, tuple(skip or ()), input_shapes, downcast, keep_metadata, registry,
                        limits or SimplifyLimits())
    passes = _passes(settings)  # a bad name fails before any work
    with entered(model, validation_kwargs(validate)) as request:
        result = _simplify(request, settings, passes)
        result.graph = None  # the handover to a next stage is optimize's; a caller gets the model
        handed_back(request, result)
    result.seconds = time.perf_counter() - start
    return result


def _simplify(request: Request, settings: Settings, passes: Any) -> SimplifyResult:
    source, validation = request.source, request.options
    original = source.model
    checker = Checker.of(source.reference(), _validation_options(validation, settings.input_shapes)) \
        if validation is not None else None
    request = overlapped(request, checker, likely_to_change(original))
    try:
        result, run = _simplified(original, settings, passes, request)
    except BaseException:  # the reference run must not outlive a failed call
        if checker is not None:
            checker.close()
        raise
    if checker is not None and result.changed:
        with stage("validating"):
            _validate(result, run, passes, checker)
    elif checker is not None:
        checker.ensure_runnable()  # nothing to compare, but an original onnxruntime cannot run cannot be validated
    else:
        from gsrewrite.validation.runner import warn_unvalidated

        warn_unvalidated(original)
    return result


@dataclass(frozen=True)
class Settings:
    """What one simplification runs: :func:`simplify`'s settings besides the model and validation."""

    only: Sequence[str] | None = None
    skip: Sequence[str] = ()
    input_shapes: ShapeSpec | None = None
    downcast: bool = False
    keep_metadata: bool = False
    registry: PassRegistry | None = None
    limits: SimplifyLimits = field(default_factory=SimplifyLimits)


def run_passes(model: onnx.ModelProto, settings: Settings, request: Request | None = None) -> SimplifyResult:
    """The passes on ``model``, not validated (``optimize`` validates its end result); the ``request``'s
    ``on_change`` is called whenever a pass changed something (``optimize`` starts its reference run at the first
    call)."""
    return _simplified(model, settings, _passes(settings), request or current())[0]


def _passes(settings: Settings) -> list[GraphPass]:
    """The passes ``settings`` select, configured with its limits."""
    registry = settings.registry if settings.registry is not None else default_pass_registry()
    selected = registry.select(settings.only, settings.skip, ["downcast"] if settings.downcast else [])
    return _configured(selected, settings.limits.max_fold_bytes)


def _simplified(original: onnx.ModelProto, settings: Settings, passes: list[GraphPass],
                request: Request) -> tuple[SimplifyResult, _Run]:
    """``passes`` to a fixed point: the result (not validated) and the run (for bisection)."""
    run = _Run(original, settings.input_shapes, settings.limits.max_rounds, settings.keep_metadata,
               request.on_change)
    with stage("simplifying"):
        out, counts, rounds = run(passes)
    changed = bool(counts) or bool(settings.input_shapes)
    if not changed and out.ByteSize() >= original.ByteSize():
        out = original  # no pass changed anything and the export alone (dropped metadata) is no smaller
    result = SimplifyResult(out, changed, counts, [p.name for p in passes], run.original, rounds)
    result.records = run.records if out is not original else []
    result.skipped_folds = skipped_folds(passes)
    result.graph = run.graph if out is not original else None
    run.graph = None
    return result, run


@dataclass
class _Run:
    """One simplification of ``original``, repeatable with different passes (for bisection)."""

    original: onnx.ModelProto
    input_shapes: ShapeSpec | None
    max_rounds: int
    keep_metadata: bool
    on_change: Callable[[], None] | None = None
    #: the graph the last run exported (typed): handed to the fusion pass by optimize
    graph: gs.Graph | None = None
    #: the match records of the last run's pattern passes (their regions: the report's)
    records: list[Any] = field(default_factory=list)

    def __call__(self, passes: Sequence[GraphPass]) -> tuple[onnx.ModelProto, dict[str, int], int]:
        """The exported model (always re-exported: see docs/simplify.md), changes per pass, rounds run."""
        return self._simplified(passes)

    def candidate(self, passes: Sequence[GraphPass]) -> Candidate[Changes]:
        """The run with ``passes`` as a bisection candidate."""
        model, counts, rounds = self(passes)
        return Candidate(model, bool(counts), (counts, rounds, self.records))

    def _simplified(self, passes: Sequence[GraphPass]) -> tuple[onnx.ModelProto, dict[str, int], int]:
        working = with_input_shapes(self.original, self.input_shapes)
        graph, constant_nodes = import_graph(working)
        self.records = []
        graph, counts, rounds = run_to_fixed_point(graph, passes, self.max_rounds, self.on_change, self.records)
        if constant_nodes:
            counts[CONSTANT_NODES] = counts.get(CONSTANT_NODES, 0) + constant_nodes
        if not is_sorted(graph):
            toposort(graph)
        # exported with every type, kept in the graph for the next stage; the interface restoration then drops the
        # value_info entries the original did not have
        out = to_model(graph, working)
        restore_interface(out, self.original, keep_io=not self.input_shapes, keep_metadata=self.keep_metadata)
        self.graph = graph
        return out, dict(counts), rounds


#: Ops that the passes usually remove or fold: a model with any of them starts its reference run before the
#: passes run; others (an already simplified CNN) when a pass first changes something, if ever. Only the
#: timing depends on this guess, never the result.
_USUAL_WORK = frozenset({"Constant", "Identity", "Dropout", "BatchNormalization", "Shape", "ConstantOfShape",
                         "Range"})


def likely_to_change(model: onnx.ModelProto) -> bool:
    """Whether the main graph has ops the passes usually remove or fold (a guess that only decides timing)."""
    return any(node.op_type in _USUAL_WORK for node in model.graph.node)


def _configured(passes: list[GraphPass], max_fold_bytes: int) -> list[GraphPass]:
    options = SimplifyOptions(max_fold_bytes=max_fold_bytes)
    configured = []
    for pass_ in passes:
        configure = getattr(pass_, "configure", None)
        configured.append(configure(options) if callable(configure) else pass_)
    return configured


def _validation_options(options: Mapping[str, Any] | None, input_shapes: ShapeSpec | None) -> dict[str, Any]:
    """The options for the validator; inputs are generated with the shapes simplify fixed, unless given."""
    options = dict(options or {})
    if input_shapes and not options.get("input_shapes") and options.get("inputs") is None:
        options["input_shapes"] = input_shapes
    return options


def _validate(result: SimplifyResult, run: _Run, passes: list[GraphPass], checker: Checker) -> None:
    first = Candidate(result.model, True, (result.counts, result.rounds, result.records))
    active = [p for p in passes if result.counts.get(p.name)]
    outcome = validate_and_bisect(first, active, run.candidate, checker, name=lambda p: p.name, kind="pass")
    report = outcome.report
    result.model, result.counts, result.records = (outcome.candidate.model, outcome.candidate.detail[0],
                                                   outcome.candidate.detail[2])
    result.validation, result.dropped = report, outcome.dropped
    result.serialized = checker.serialized(result.model) if report.ok else None
    if not report.ok:
        log.warning("the simplified model does not agree with the original (%s): keeping the original",
                    report.summary())
        result.model, result.counts, result.changed, result.records = run.original, {}, False, []
