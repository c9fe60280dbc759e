"""onnxruntime sessions for validation: plain CPU execution, no graph optimizations, quiet logs.

Graph optimizations are disabled so that onnxruntime's own fusions do not hide (or cause) differences
between the two models. A model given as a path is handed to onnxruntime by path; an in-memory model
is serialized without its large weights, which onnxruntime gets as arrays (``in_memory``), or serialized whole
when its weights are small; when larger than protobuf's 2 GB limit even so, it is written to a temporary folder
with its tensors in an external data file.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import EncodeError

from gsrewrite.errors import CannotValidateError, ValidationError
from gsrewrite.model_io.functions import expansion_problem
from gsrewrite.model_io.tensors import declared_nbytes
from gsrewrite.validation.in_memory import InMemoryModel, in_memory_model
from gsrewrite.validation.large_models import MAX_PROTOBUF_BYTES, estimated_bytes, write_with_external_data

log = logging.getLogger(__name__)

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)


@dataclass
class ModelSource:
    """A model to run: its proto (for the signature) and, when it came from a file, its path."""

    role: str
    proto: onnx.ModelProto
    path: Path | None = None
    load_seconds: float = 0.0
    data: bytes | None = field(default=None, repr=False)  # the proto already serialized, when it was


#: What the validation functions take for a model: a proto, a path, or a prepared :class:`ModelSource`.
ModelArg = onnx.ModelProto | str | os.PathLike | ModelSource


def resolve_model(model: ModelArg, role: str) -> ModelSource:
    """A :class:`ModelSource` from a ModelProto or a path (checked by ``gsrewrite.model_io.load_model``).

    For a path only the graph is read here (external data is validated, not loaded); onnxruntime loads the
    model from the path.
    """
    if isinstance(model, ModelSource):
        return model
    if isinstance(model, onnx.ModelProto):
        return ModelSource(role, model)
    if isinstance(model, (str, os.PathLike)):
        from gsrewrite.model_io import load_model

        start = time.perf_counter()
        proto = load_model(model, load_external_data=False)  # checked; onnxruntime reads the data itself
        return ModelSource(role, proto, Path(model), time.perf_counter() - start)
    raise TypeError(f"the {role} model must be an onnx.ModelProto or a path, not {type(model).__name__}")


@dataclass
class Session:
    """An onnxruntime session for one model, with the time spent creating and running it."""

    role: str
    session: object
    output_names: list[str]
    create_seconds: float
    run_seconds: float = field(default=0.0)

    def run(self, feed: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """All outputs by name (arrays; lists of arrays for sequence outputs).

        Raises :class:`ValidationError` (naming the model) when onnxruntime fails.
        """
        start = time.perf_counter()
        options = _quiet_run()
        limit = run_time_limit()
        timer = threading.Timer(limit, setattr, (options, "terminate", True))
        timer.daemon = True
        timer.start()
        try:
            values = self.session.run(None, dict(feed), options)  # type: ignore[attr-defined]
        except Exception as exc:  # onnxruntime raises its own exception types (Fail, InvalidArgument, ...)
            if options.terminate:
                raise CannotValidateError(
                    f"cannot validate: the {self.role} model ran longer than {limit:g} s on the validation inputs "
                    f"({RUN_TIMEOUT_ENV} sets the limit; --no-validate rewrites without checking)") from None
            raise ValidationError(f"onnxruntime failed to run the {self.role} model: {_first_line(exc)}") from None
        finally:
            timer.cancel()
            self.run_seconds += time.perf_counter() - start
        return dict(zip(self.output_names, map(_as_output, values), strict=True))


@contextlib.contextmanager
def open_session(source: ModelSource, providers: Sequence[str] | None = None,
                 reuse_memory: bool = True) -> Iterator[Session]:
    """Create an onnxruntime session for ``source``; any temporary files live as long as the session.

    ``reuse_memory=False`` skips onnxruntime's buffer-reuse planning (every intermediate gets its own
    buffer): for small inputs that more than halves session
    creation (24 -> 9 ms for a 300-node GPT-2; the planning dominated it), at a memory cost that grows with the
    activations. Both models of a comparison are run with the same settings.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    # idle pool threads sleep instead of spinning: the reference run works beside the rewrite (a worker thread),
    # and spinning threads took the CPU the rewrite needed (optimize on a 2-core machine: ~10-15% slower)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_mem_reuse = reuse_memory
    if _weight_bytes(source.proto) <= SINGLE_THREAD_BYTES:
        options.intra_op_num_threads = 1
    # no prepacking of GEMM weights: a validation session runs 2-3 times, and packing every weight at session
    # creation costs more than packing on the fly in those runs (ViT-base: session 0.10-0.15 -> 0.04-0.05 s,
    # two runs +0.012 s)
    options.add_session_config_entry("session.disable_prepacking", "1")
    problem = expansion_problem(source.proto)  # onnxruntime would expand them, in native code, for minutes
    if problem is not None:
        if source.role == "original":
            raise cannot_validate(f"the model cannot be run: {problem}")
        raise ValidationError(f"onnxruntime cannot load the {source.role} model: {problem}")
    with contextlib.ExitStack() as stack:
        model_arg, weights = model_argument(source, stack)
        if weights is not None:
            weights.add_to(options)  # the arrays are used in place: ``weights`` lives as long as the session
        start = time.perf_counter()
        try:
            session = ort.InferenceSession(model_arg, options, providers=list(providers or DEFAULT_PROVIDERS))
        except Exception as exc:  # onnxruntime's exception types are not part of its public API
            if source.role == "original":
                raise cannot_validate(_first_line(exc)) from None
            raise ValidationError(f"onnxruntime cannot load the {source.role} model: {_first_line(exc)}") from None
        seconds = time.perf_counter() - start
        log.debug("%s session created in %.3f s", source.role, seconds)
        names = [o.name for o in session.get_outputs()]
        yield Session(source.role, session, names, seconds)


def cannot_validate(reason: str) -> CannotValidateError:
    """The error for an original that onnxruntime cannot run: nothing can be compared with it."""
    return CannotValidateError(f"cannot validate: {reason}; --no-validate rewrites without checking")


def check_outputs(source: ModelSource) -> None:
    """Raise :class:`CannotValidateError` when the model has no outputs (there would be nothing to compare)."""
    if not source.proto.graph.output:
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
_inner_step: contextvars.ContextVar[bool] = contextvars.ContextVar("gsrewrite_unvalidated_inner", default=False)


@contextlib.contextmanager
def unvalidated_inner_step() -> Iterator[None]:
    """Within: :func:`warn_unvalidated` stays quiet (an unvalidated step of a command that validates at its end,
    as ``optimize``'s cleanup)."""
    token = _inner_step.set(True)
    try:
        yield
    finally:
        _inner_step.reset(token)


def why_unrunnable(model: onnx.ModelProto) -> str | None:
    """A reason onnxruntime will not run ``model``, found without a session (no outputs, an opset newer than
    onnx knows, an op domain it does not implement), or ``None``: a cheap look for ``--no-validate``."""
    if not model.graph.output:
        return "the model has no outputs"
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
    if _inner_step.get():
        return
    reason = why_unrunnable(model)
    if reason is not None and (model.graph.name, reason) not in _warned:
        _warned.add((model.graph.name, reason))
        log.warning("not validated, and onnxruntime could not have validated it: %s", reason)


#: Models with at most this many bytes of weights run on one thread: on validation's small inputs a thread pool
#: gains less than it costs to create, and the reference run shares the CPU with the rewrite beside it (2-5% of
#: simplify/optimize wall time on BERT/GPT-2/ResNet exports); bigger models get onnxruntime's default pool.
SINGLE_THREAD_BYTES = 64 << 20


def _weight_bytes(model: onnx.ModelProto) -> int:
    """The declared size of the main graph's initializers (shapes only: cheap, external data included)."""
    try:
        return sum(declared_nbytes(t) for t in model.graph.initializer)
    except (KeyError, ValueError, TypeError):  # a type without a size: onnxruntime will say what is wrong
        return SINGLE_THREAD_BYTES + 1


def model_argument(source: ModelSource, stack: contextlib.ExitStack, *, in_memory_first: bool = True
                   ) -> tuple[str | bytes, InMemoryModel | None]:
    """The path or bytes onnxruntime loads, and the weights it gets as arrays (an in-memory model's large ones):
    the one place that decides how a model reaches onnxruntime. Validation splits the weights out first (faster
    sessions); ``in_memory_first=False`` (bench: the model as a user's program loads it) serializes it whole and
    splits only over protobuf's 2 GB. A graph over 2 GB even without its weights goes through a temporary folder
    with external data, which lives as long as ``stack``."""
    if source.path is not None:
        return str(source.path), None
    split = in_memory_model(source.proto, source.data) if in_memory_first else None
    if split is not None:
        return split.data, split
    if source.data is not None:
        return source.data, None
    serialized = serialize(source.proto)
    if serialized is not None:
        return serialized, None
    split = None if in_memory_first else in_memory_model(source.proto)
    if split is not None:
        return split.data, split
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gsrewrite-validate-")))
    log.info("the %s model is larger than 2 GB; passing it to onnxruntime through %s", source.role, folder)
    return str(write_with_external_data(source.proto, folder)), None


def serialized_source(model: onnx.ModelProto, role: str) -> ModelSource:
    """A source for ``model`` serialized now (in the calling thread), or as-is when it is over 2 GB."""
    return ModelSource(role, model, data=serialize(model))


def serialize(model: onnx.ModelProto) -> bytes | None:
    """The serialized model, or ``None`` when it is over protobuf's 2 GB limit."""
    if estimated_bytes(model) > MAX_PROTOBUF_BYTES:
        return None
    try:
        data = model.SerializeToString()
    except (EncodeError, ValueError):  # over the limit after all (e.g. tensors stored as float_data)
        return None
    return data if len(data) <= MAX_PROTOBUF_BYTES else None


#: Environment variable: seconds one onnxruntime run may take during validation (default
#: :data:`DEFAULT_RUN_TIMEOUT`); a model that runs longer (a Loop with 2**62 trips) cannot be validated.
RUN_TIMEOUT_ENV = "GSREWRITE_RUN_TIMEOUT"
DEFAULT_RUN_TIMEOUT = 600.0


def run_time_limit() -> float:
    """Seconds one validation run may take (:data:`RUN_TIMEOUT_ENV`, else :data:`DEFAULT_RUN_TIMEOUT`)."""
    try:
        value = float(os.environ.get(RUN_TIMEOUT_ENV, DEFAULT_RUN_TIMEOUT))
    except ValueError:
        return DEFAULT_RUN_TIMEOUT
    return value if value > 0 else DEFAULT_RUN_TIMEOUT


def _quiet_run() -> Any:
    """Run options without onnxruntime's own error log: a failure is raised, and reported, by the caller."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


def _as_output(value: Any) -> Any:
    if isinstance(value, list):  # a sequence output
        return [np.asarray(item) for item in value]
    return np.asarray(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_once(model: onnx.ModelProto, feed: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Run ``model`` once on ``feed`` under validation's time limit (a plugin about to run a model many times,
    a quantizer's calibration, checks first that one run ends: a model that loops forever is an error)."""
    reason = why_unrunnable(model)
    if reason is not None:
        raise cannot_validate(reason)
    with open_session(serialized_source(model, "original"), reuse_memory=False) as session:
        return session.run(feed)
