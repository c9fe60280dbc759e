"""onnxruntime latency of one or more models on the same inputs, runs interleaved across the models (so machine
noise falls on all of them alike): min and median per model and the ratio to the first.

Inputs are given (an ``.npz`` file) or generated at validation's sample sizes (``input_shapes`` fixes dims);
every model must take the same inputs. Sessions use onnxruntime's optimization level ``ort_level`` (``all`` by
default: what users run) and ``threads`` intra-op threads (1 by default: the least noisy). ``save_optimized``
writes onnxruntime's own offline-optimized model of the first model (its ``optimized_model_filepath``).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from gsrewrite.errors import InputDataError, UsageError, ValidationError
from gsrewrite.model_io.functions import expansion_problem
from gsrewrite.validation.runner import ModelSource, model_argument

ORT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
              "all": "ORT_ENABLE_ALL"}


@dataclass
class Timing:
    model: str
    times: list[float] = field(default_factory=list)

    @property
    def min_ms(self) -> float:
        return min(self.times) * 1000 if self.times else float("nan")

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1000 if self.times else float("nan")


@dataclass
class BenchResult:
    timings: list[Timing]
    runs: int
    threads: int
    ort_level: str
    inputs: dict[str, list[int]]

    def to_dict(self) -> dict[str, Any]:
        first = self.timings[0] if self.timings else None
        return {"runs": self.runs, "threads": self.threads, "ort_level": self.ort_level, "inputs": self.inputs,
                "models": [{"model": t.model, "min_ms": round(t.min_ms, 4), "median_ms": round(t.median_ms, 4),
                            "ratio_min": round(t.min_ms / first.min_ms, 4) if first else None,
                            "ratio_median": round(t.median_ms / first.median_ms, 4) if first else None}
                           for t in self.timings]}


def bench_inputs(model: onnx.ModelProto, given: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
                 input_shapes: Any = None, seed: int = 0) -> dict[str, np.ndarray]:
    """The feed: given (an .npz path or a dict) or generated at the sample size (sizes checked against the
    memory budget before anything is allocated)."""
    from gsrewrite.validation.input_sets import fit_budget
    from gsrewrite.validation.inputs import generate_inputs, plan_inputs
    from gsrewrite.validation.memory import default_budget
    from gsrewrite.validation.shapes import resolve_shapes
    from gsrewrite.validation.signature import model_inputs
    from gsrewrite.validation.sizes import SizeSet

    if given is not None and not isinstance(given, Mapping):
        try:
            with np.load(given) as data:
                return {k: data[k] for k in data.files}
        except (OSError, ValueError) as exc:
            raise InputDataError(f"--inputs {given}: not a readable .npz file ({exc})") from None
    if isinstance(given, Mapping):
        return dict(given)
    specs = model_inputs(model)
    sample = resolve_shapes(specs, input_shapes)
    fit_budget(model, specs, [SizeSet("sample", sample)], default_budget())
    return generate_inputs(plan_inputs(model, specs, sample), seed)


def session(model: onnx.ModelProto | str, threads: int, ort_level: str, optimized_path: str | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[ort_level])
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 4  # a model it cannot load is reported once, by us
    if optimized_path is not None:
        options.optimized_model_filepath = optimized_path
    keep = contextlib.ExitStack()  # a temporary folder for a graph over 2 GB, if one is needed
    weights = None
    if isinstance(model, onnx.ModelProto):
        problem = expansion_problem(model)  # onnxruntime would expand them, in native code, for minutes
        if problem is not None:
            raise ValidationError(f"onnxruntime cannot load the model: {problem}")
        # serialized whole, as a user's program loads it; over 2 GB the weights go as arrays (validation.in_memory)
        source, weights = model_argument(ModelSource("benchmarked", model), keep, in_memory_first=False)
        if weights is not None:
            weights.add_to(options)
    else:
        source = model
    try:
        opened = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        keep.close()
        raise ValidationError(f"onnxruntime cannot load {getattr(model, 'name', None) or 'the model'}: "
                              f"{str(exc).splitlines()[0]}") from None
    # the arrays onnxruntime uses in place (and any temporary folder) live as long as the session
    opened._gsrewrite_keep = (weights, keep)
    return opened


def bench(models: Sequence[tuple[str, onnx.ModelProto | str]], *, runs: int = 20, warmup: int = 2,
          threads: int = 1, ort_level: str = "all", inputs: Mapping[str, np.ndarray] | None = None,
          save_optimized: str | None = None) -> BenchResult:
    """Time each ``(label, model)`` ``runs`` times, interleaved; ``inputs`` default to generated ones for the
    first model."""
    if not models:
        raise UsageError("no model to benchmark")
    if ort_level not in ORT_LEVELS:
        raise UsageError(f"--ort-level must be one of {', '.join(ORT_LEVELS)}, not {ort_level!r}")
    if runs < 1:
        raise UsageError("--runs must be at least 1")
    from gsrewrite.validation.runner import why_unrunnable

    for label, model in models:
        reason = why_unrunnable(model if isinstance(model, onnx.ModelProto) else onnx.load(model,
                                                                                          load_external_data=False))
        if reason is not None:
            raise ValidationError(f"onnxruntime will not run {label}: {reason}")
    first = models[0][1]
    feed = dict(inputs) if inputs is not None else bench_inputs(
        first if isinstance(first, onnx.ModelProto) else onnx.load(first, load_external_data=False))
    sessions = [session(model, threads, ort_level, save_optimized if i == 0 else None)
                for i, (_, model) in enumerate(models)]
    feeds = []
    for (label, _), sess in zip(models, sessions, strict=True):
        names = {i.name for i in sess.get_inputs()}
        missing = sorted(names - set(feed))
        if missing:
            raise InputDataError(f"{label} takes input {missing[0]!r}, which the first model's inputs lack")
        feeds.append({k: v for k, v in feed.items() if k in names})
    timings = [Timing(label) for label, _ in models]
    for sess, one in zip(sessions, feeds, strict=True):
        for _ in range(warmup):
            _run(sess, one)
    for _ in range(runs):
        for sess, one, timing in zip(sessions, feeds, timings, strict=True):
            start = time.perf_counter()
            _run(sess, one)
            timing.times.append(time.perf_counter() - start)
    return BenchResult(timings, runs, threads, ort_level, {k: list(v.shape) for k, v in feed.items()})


def _run(sess: Any, feed: dict[str, np.ndarray]) -> None:
    """One run, stopped after validation's run time limit (a model that loops forever is an error, not a hang)."""
    import threading

    import onnxruntime as ort

    from gsrewrite.validation.runner import RUN_TIMEOUT_ENV, run_time_limit

    options = ort.RunOptions()
    options.log_severity_level = 4  # a terminated run is reported once, by us
    limit = run_time_limit()
    timer = threading.Timer(limit, setattr, (options, "terminate", True))
    timer.daemon = True
    timer.start()
    try:
        sess.run(None, feed, options)
    except Exception as exc:
        if options.terminate:
            raise ValidationError(f"a run took longer than {limit:g} s ({RUN_TIMEOUT_ENV} sets the limit)") \
                from None
        raise ValidationError(f"onnxruntime failed to run: {str(exc).splitlines()[0]}") from None
    finally:
        timer.cancel()
