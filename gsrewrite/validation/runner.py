"""onnxruntime sessions: the one place gsrewrite creates one (:func:`create_session`, for validation, the shape
check, extract's check, calibration and plugins' checks; with :class:`BenchSettings` for timing) and runs it
(:meth:`Session.run`: every run under the time limit and stopped by Ctrl-C or SIGTERM, see
:mod:`gsrewrite.validation.run_limits`).

Validation sessions: plain CPU execution, no graph optimizations, quiet logs. Graph optimizations are disabled
so that onnxruntime's own fusions do not hide (or cause) differences between the two models. A model given as a
path is handed to onnxruntime by path; an in-memory model is serialized without its large weights, which
onnxruntime gets as arrays (``in_memory``), or serialized whole when its weights are small; when larger than
protobuf's 2 GB limit even so, it is written to a temporary folder with its tensors in an external data file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import EncodeError

from gsrewrite.errors import CannotValidateError, ValidationError
from gsrewrite.model_io.disk_space import writing
from gsrewrite.model_io.functions import expansion_problem
from gsrewrite.model_io.graph_walk import iter_graphs
from gsrewrite.model_io.source import Source
from gsrewrite.model_io.weights import has_references
from gsrewrite.request import bound, current
from gsrewrite.validation.in_memory import InMemoryModel, in_memory_model
from gsrewrite.validation.large_models import MAX_PROTOBUF_BYTES, estimated_bytes, write_with_external_data
from gsrewrite.validation.loop_trips import endless_loop
from gsrewrite.validation.run_limits import RUN_TIMEOUT_ENV, RunTimeLimitError, limited_run, run_time_limit

log = logging.getLogger(__name__)

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)


#: What the validation functions take for a model: a proto, a path, or a prepared model handle (:class:`Source`).
ModelArg = onnx.ModelProto | str | os.PathLike | Source


def resolve_model(model: ModelArg, role: str) -> Source:
    """A model handle (:class:`~gsrewrite.model_io.source.Source`) from a ModelProto or a path (checked by
    ``gsrewrite.model_io.load_model``).

    For a path only the graph is read here (external data is validated, not loaded); onnxruntime loads the
    model from the path.
    """
    if isinstance(model, Source):
        return model
    if isinstance(model, onnx.ModelProto):
        return Source(model, role=role)
    if isinstance(model, (str, os.PathLike)):
        from gsrewrite.model_io import load_model

        start = time.perf_counter()
        proto = load_model(model, load_external_data=False)  # checked; onnxruntime reads the data itself
        return Source(proto, Path(model), role=role, load_seconds=time.perf_counter() - start)
    raise TypeError(f"the {role} model must be an onnx.ModelProto or a path, not {type(model).__name__}")


@dataclass(frozen=True)
class BenchSettings:
    """A session as a user's program makes it, for timing (``bench``, compress's latency): onnxruntime's graph
    optimizations at ``ort_level`` (a key of :data:`ORT_LEVELS`), ``threads`` intra-op threads, prepacking and
    spinning as onnxruntime's defaults; ``optimized_path``: where onnxruntime writes its optimized model."""

    ort_level: str = "all"
    threads: int = 1
    optimized_path: str | None = None


#: ``--ort-level`` values -> onnxruntime's GraphOptimizationLevel names
ORT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
              "all": "ORT_ENABLE_ALL"}


@dataclass
class Session:
    """An onnxruntime session for one model, with the time spent creating and running it; :meth:`close` (or
    :func:`open_session`'s block ending) removes what it needed (a temporary folder for a graph over 2 GB)."""

    role: str
    session: object
    output_names: list[str]
    create_seconds: float
    run_seconds: float = field(default=0.0)
    last_seconds: float = field(default=0.0)  # onnxruntime's own time in the last run (no thread, no dict)
    what: str = ""
    input_names: list[str] = field(default_factory=list)
    _keep: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    def run(self, feed: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """All outputs by name (arrays; lists of arrays for sequence outputs), under :func:`run_time_limit`.

        Raises :class:`ValidationError` (naming the model) when onnxruntime fails, its subclass
        :class:`CannotValidateError` when the run took longer than the limit.
        """
        start = time.perf_counter()
        try:
            values, self.last_seconds = limited_run(
                lambda options: self.session.run(None, dict(feed), options),  # type: ignore[attr-defined]
                self.what)
        except RunTimeLimitError:
            raise
        except Exception as exc:  # onnxruntime raises its own exception types (Fail, InvalidArgument, ...)
            raise ValidationError(f"onnxruntime failed to run {self.what}: {_first_line(exc)}") from None
        finally:
            self.run_seconds += time.perf_counter() - start
        return dict(zip(self.output_names, map(_as_output, values), strict=True))

    def close(self) -> None:
        """Release the session and remove its temporary files (idempotent)."""
        self.session = None
        self._keep.close()


@contextlib.contextmanager
def open_session(source: Source, providers: Sequence[str] | None = None,
                 reuse_memory: bool = True, *, bench: BenchSettings | None = None,
                 optimized: bool = False) -> Iterator[Session]:
    """:func:`create_session` for the block; the session is closed (temporary files removed) when it ends."""
    session = create_session(source, providers, reuse_memory, bench=bench, optimized=optimized)
    try:
        yield session
    finally:
        session.close()


def create_session(source: Source, providers: Sequence[str] | None = None, reuse_memory: bool = True, *,
                   bench: BenchSettings | None = None, optimized: bool = False) -> Session:
    """The onnxruntime session for ``source``: validation's settings (below), or with ``bench`` those of a
    user's program. :meth:`Session.close` it (or use :func:`open_session`).

    Refused before onnxruntime sees the model: local functions that expand past
    :data:`~gsrewrite.model_io.functions.MAX_EXPANDED_NODES` nodes (onnxruntime would expand them, in native
    code, for minutes), and a Loop that cannot end within the run time limit
    (:mod:`~gsrewrite.validation.loop_trips`: :class:`RunTimeLimitError` at once, not after the limit). Errors:
    :class:`CannotValidateError` for the ``original`` role (nothing can be compared with it),
    :class:`ValidationError` for any other.

    ``reuse_memory=False`` skips onnxruntime's buffer-reuse planning (every intermediate gets its own
    buffer): for the one-off sessions of small probes (shape checks, side computations) that more than halves
    session creation (benchmarks/results/code_figures.md), at a memory cost that grows with the activations.
    Validation plans reuse (its sessions run the model's real sizes). ``optimized``: validation's settings but
    with onnxruntime's graph optimizations on (``ORT_ENABLE_ALL``), to measure the model's own noise
    (:mod:`gsrewrite.validation.noise`).
    """
    import onnxruntime as ort

    problem = expansion_problem(source.model)
    if problem is not None:
        if source.role == "original":
            raise cannot_validate(f"the model cannot be run: {problem}")
        raise ValidationError(f"onnxruntime cannot load {source.what}: {problem}")
    endless = endless_loop(source.model, run_time_limit())
    if endless is not None:  # refused now rather than stopped at the limit
        raise RunTimeLimitError(f"{source.what} cannot finish a run: {endless} ({RUN_TIMEOUT_ENV}=SECONDS sets "
                                "the limit)")
    options = _bench_options(bench) if bench is not None else _validation_options(source, reuse_memory)
    if optimized and bench is None:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if source.path is None and source.weights_dir is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", source.weights_dir)
    keep = contextlib.ExitStack()
    try:
        # validation splits the weights out first (faster sessions); bench serializes the model whole, as a user's
        # program loads it (split only over protobuf's 2 GB), except a model whose weights stay in their files:
        # onnxruntime maps those as it would a user's external data, and the payloads a strategy made reach it
        # without a serialized copy beside the model's (dynamic-int8 BERT-base: 4 copies of the int8 weights)
        split_first = bench is None or has_references(source.model)
        model_arg, weights = model_argument(source, keep, in_memory_first=split_first)
        if weights is not None:
            weights.add_to(options)  # used in place: ``weights`` lives as long as the session
            keep.enter_context(contextlib.nullcontext(weights))
        start = time.perf_counter()
        try:
            session = ort.InferenceSession(model_arg, options, providers=list(providers or DEFAULT_PROVIDERS))
        except Exception as exc:  # onnxruntime's exception types are not part of its public API
            if source.role == "original" and bench is None:
                raise cannot_validate(_first_line(exc)) from None
            raise ValidationError(f"onnxruntime cannot load {source.what}: {_first_line(exc)}") from None
        if weights is not None:
            weights.session_created()
    except BaseException:
        keep.close()
        raise
    seconds = time.perf_counter() - start
    log.debug("%s session created in %.3f s", source.role, seconds)
    return Session(source.role, session, [o.name for o in session.get_outputs()], seconds, what=source.what,
                   input_names=[i.name for i in session.get_inputs()], _keep=keep)


def _validation_options(source: Source, reuse_memory: bool) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    # Both settings below are per session and were measured at base width (benchmarks/results/
    # validation_sessions.md); each saves >= 5% of optimize/simplify wall time there.
    # idle pool threads sleep instead of spinning: the reference run works beside the rewrite (a worker thread),
    # and spinning threads take the CPU the rewrite needs
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_mem_reuse = reuse_memory
    # no memory arena: a few runs do not repay it, and its regions grow by powers of two and stay with the session
    # (GPT-2 base dynamo export at the long-past size: +187 MB per run with the arena, +5 MB without)
    options.enable_cpu_mem_arena = False
    # no prepacking of GEMM weights: a validation session runs 2-3 times, and packing every weight at session
    # creation costs more than packing on the fly in those runs; but MatMulNBits without its packed weights takes
    # a slow path (an int4 GPT-2 base: 3 runs 0.45 -> 0.20 s with prepacking, session creation the same), so a
    # model with 4-bit weights keeps onnxruntime's default
    if not _has_nbits(source.model):
        options.add_session_config_entry("session.disable_prepacking", "1")
    return options


def _has_nbits(model: onnx.ModelProto) -> bool:
    return any(node.op_type == "MatMulNBits" for graph in iter_graphs(model) for node in graph[0].node)


def _bench_options(settings: BenchSettings) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[settings.ort_level])
    options.intra_op_num_threads = settings.threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 4  # a model it cannot load is reported once, by us
    if settings.optimized_path is not None:
        options.optimized_model_filepath = settings.optimized_path
    return options


def cannot_validate(reason: str) -> CannotValidateError:
    """The error for an original that onnxruntime cannot run: nothing can be compared with it."""
    return CannotValidateError(f"cannot validate: {reason}; --no-validate rewrites without checking")


def check_outputs(source: Source) -> None:
    """Raise :class:`CannotValidateError` when the model has no outputs (there would be nothing to compare)."""
    if not source.model.graph.output:
        raise cannot_validate(f"the {source.role} model has no outputs")


def check_runnable(model: ModelArg, providers: Sequence[str] | None = None) -> None:
    """Raise :class:`CannotValidateError` unless onnxruntime can load ``model`` as an original (its session is
    created and closed; nothing runs). For a model nothing changed, whose validation is otherwise skipped."""
    source = resolve_model(model, "original")
    check_outputs(source)
    with open_session(source, providers, reuse_memory=False):
        pass


#: Operator domains onnxruntime's CPU provider implements (other domains need a custom op library).
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc", "ai.onnx.training",
                           "ai.onnx.preview.training", "com.ms.internal.nhwc"})
_warned: set[tuple[str, str]] = set()


@contextlib.contextmanager
def unvalidated_inner_step() -> Iterator[None]:
    """Within: :func:`warn_unvalidated` stays quiet (an unvalidated step of a command that validates at its end,
    as ``optimize``'s cleanup)."""
    with bound(inner_step=True):
        yield


def why_unrunnable(model: onnx.ModelProto) -> str | None:
    """A reason onnxruntime will not run ``model``, found without a session (no outputs, an opset newer than
    onnx knows, an op domain it does not implement, local functions that expand past the limit), or ``None``: a
    cheap look for ``--no-validate`` and before a command's work."""
    if not model.graph.output:
        return "the model has no outputs"
    problem = expansion_problem(model) or endless_loop(model, run_time_limit())
    if problem is not None:
        return problem
    newest = onnx.defs.onnx_opset_version()
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > newest:
            return f"opset {opset.version} is newer than any onnx knows ({newest})"
    local = {f.domain for f in model.functions}
    unknown = sorted({n.domain for n in model.graph.node} - KNOWN_DOMAINS - local)
    return f"ops of the unknown domain {unknown[0]!r}" if unknown else None


def warn_unvalidated(model: onnx.ModelProto) -> None:
    """For a rewrite without validation: log a warning (once per model name and reason) when onnxruntime
    would not run the model (see :func:`why_unrunnable`)."""
    if current().inner_step:
        return
    reason = why_unrunnable(model)
    if reason is not None and (model.graph.name, reason) not in _warned:
        _warned.add((model.graph.name, reason))
        log.warning("not validated, and onnxruntime could not have validated it: %s", reason)


def model_argument(source: Source, stack: contextlib.ExitStack, *, in_memory_first: bool = True
                   ) -> tuple[str | bytes, InMemoryModel | None]:
    """The path or bytes onnxruntime loads, and the weights it gets as arrays (an in-memory model's large ones):
    the one place that decides how a model reaches onnxruntime. Validation splits the weights out first (faster
    sessions); ``in_memory_first=False`` (bench: the model as a user's program loads it) serializes it whole and
    splits only over protobuf's 2 GB. A graph over 2 GB even without its weights goes through a temporary folder
    with external data, which lives as long as ``stack``."""
    if source.path is not None:
        return str(source.path), None
    split = in_memory_model(source.model, source.data) if in_memory_first else None
    if split is not None:
        return split.data, split
    if source.data is not None:
        return source.data, None
    serialized = serialize(source.model)
    if serialized is not None:
        return serialized, None
    split = None if in_memory_first else in_memory_model(source.model)
    if split is not None:
        return split.data, split
    with writing(f"the {source.role} model with its external data for onnxruntime"):
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gsrewrite-validate-")))
        log.info("the %s model is larger than 2 GB; passing it to onnxruntime through %s", source.role, folder)
        return str(write_with_external_data(source.model, folder)), None


def serialized_source(model: onnx.ModelProto, role: str) -> Source:
    """A source for ``model`` serialized now (in the calling thread), or as-is when it is over 2 GB."""
    return Source(model, role=role, data=serialize(model))


def serialize(model: onnx.ModelProto) -> bytes | None:
    """The serialized model, or ``None`` when it is over protobuf's 2 GB limit."""
    if estimated_bytes(model) > MAX_PROTOBUF_BYTES:
        return None
    try:
        data = model.SerializeToString()
    except (EncodeError, ValueError):  # over the limit after all (e.g. tensors stored as float_data)
        return None
    return data if len(data) <= MAX_PROTOBUF_BYTES else None


def _as_output(value: Any) -> Any:
    if isinstance(value, list):  # a sequence output
        return [np.asarray(item) for item in value]
    return np.asarray(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_once(model: onnx.ModelProto, feed: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Run ``model`` once on ``feed`` under the run time limit (a plugin about to run a model many times,
    a quantizer's calibration, checks first that one run ends: a model that loops forever is an error)."""
    reason = why_unrunnable(model)
    if reason is not None:
        raise cannot_validate(reason)
    with open_session(serialized_source(model, "original"), reuse_memory=False) as session:
        return session.run(feed)


def model_session(model: onnx.ModelProto | bytes, what: str) -> Session:
    """A session for a plugin that runs a small model many times (a pattern check evaluating a side computation):
    validation's settings, every run under the time limit; messages name the model ``what``. Errors are
    :class:`ValidationError`; :meth:`Session.close` it when done."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)
    data = model if isinstance(model, bytes) else None
    return create_session(Source(proto, role="computed", data=data, label=what), reuse_memory=False)
