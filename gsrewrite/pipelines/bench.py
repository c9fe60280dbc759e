"""onnxruntime latency of one or more models on the same inputs, runs interleaved across the models (so machine
noise falls on all of them alike): min and median per model and the ratio to the first.

Inputs are given (an ``.npz`` file) or generated at validation's sample sizes (``input_shapes`` fixes dims);
every model must take the same inputs. Sessions use onnxruntime's optimization level ``ort_level`` (``all`` by
default: what users run) and ``threads`` intra-op threads (1 by default: the least noisy). ``save_optimized``
writes onnxruntime's own offline-optimized model of the first model (its ``optimized_model_filepath``).

How many runs: ``runs`` and ``warmup`` when given. By default, as timeit's autorange bounds its loops by time,
up to :data:`DEFAULT_RUNS` timed rounds after up to :data:`DEFAULT_WARMUP` warm-up rounds (a round runs every
model once), fewer when they would not fit the :data:`TIME_BUDGET`: the warm-up stops once it has taken a fifth
of the budget, the timed rounds when the next one would end past it; at least one of each. The count is in the
result. Sessions and runs are validation's runner's (one time limit per run, Ctrl-C stops a run).
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
from gsrewrite.model_io.source import Source
from gsrewrite.validation.phases import Phase
from gsrewrite.validation.runner import (
    ORT_LEVELS,
    BenchSettings,
    Session,
    create_session,
    resolve_model,
)

#: timed rounds when ``runs`` is not given (fewer when over the time budget)
DEFAULT_RUNS = 20
#: warm-up rounds when ``warmup`` is not given (fewer when over a fifth of the time budget)
DEFAULT_WARMUP = 2
#: seconds the default warm-up and timed rounds may take together (the last round may end past it)
TIME_BUDGET = 10.0


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
    warmup: int = 0
    budget_s: float | None = None  # the time budget that bounded the timed runs (None: ``runs`` was given)

    @property
    def cut_short(self) -> bool:
        """Whether the time budget ended the timed rounds before :data:`DEFAULT_RUNS`."""
        return self.budget_s is not None and self.runs < DEFAULT_RUNS

    def to_dict(self) -> dict[str, Any]:
        first = self.timings[0] if self.timings else None
        return {"runs": self.runs, "warmup": self.warmup, "time_budget_s": self.budget_s,
                "threads": self.threads, "ort_level": self.ort_level, "inputs": self.inputs,
                "models": [{"model": t.model, "min_ms": round(t.min_ms, 4), "median_ms": round(t.median_ms, 4),
                            "ratio_min": round(t.min_ms / first.min_ms, 4) if first else None,
                            "ratio_median": round(t.median_ms / first.median_ms, 4) if first else None}
                           for t in self.timings]}


def bench_inputs(model: onnx.ModelProto, given: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
                 input_shapes: Any = None, seed: int = 0) -> dict[str, np.ndarray]:
    """The feed: given (an .npz path or a dict) or generated at the sample size (sizes checked against the
    memory budget before anything is allocated)."""
    from gsrewrite.validation.input_sets import sample_size
    from gsrewrite.validation.inputs import generate_inputs, plan_inputs
    from gsrewrite.validation.signature import model_inputs

    if given is not None and not isinstance(given, Mapping):
        from gsrewrite.validation.npz_files import load_npz

        return load_npz(given)  # a regular file, every array sized from its header before it is read
    if isinstance(given, Mapping):
        return dict(given)
    specs = model_inputs(model)
    size = sample_size(model, specs, input_shapes)
    return generate_inputs(plan_inputs(model, specs, size.shapes, positions_start=size.positions_start), seed)


def session(model: onnx.ModelProto | str | Source, threads: int, ort_level: str,
            optimized_path: str | None = None) -> Session:
    """The onnxruntime session of a benchmarked model (validation's runner, :class:`BenchSettings`); close it."""
    return create_session(resolve_model(model, "benchmarked"), bench=BenchSettings(ort_level, threads,
                                                                                   optimized_path))


def bench(models: Sequence[tuple[str, onnx.ModelProto | str]], *, runs: int | None = None,
          warmup: int | None = None, threads: int = 1, ort_level: str = "all",
          inputs: Mapping[str, np.ndarray] | None = None, save_optimized: str | None = None,
          time_budget: float = TIME_BUDGET) -> BenchResult:
    """Time each ``(label, model)`` interleaved; ``inputs`` default to generated ones for the first model.
    ``runs``/``warmup``: rounds, exactly; ``None``: bounded by ``time_budget`` seconds (see the module)."""
    feeds = None if inputs is None else [inputs]
    return _bench(models, feeds, runs, warmup, threads, ort_level, save_optimized, time_budget)[0]


def bench_phases(models: Sequence[tuple[str, onnx.ModelProto | str]], phases: Sequence[Phase], *,
                 runs: int | None = None, warmup: int | None = None, threads: int = 1, ort_level: str = "all",
                 time_budget: float = TIME_BUDGET) -> list[BenchResult]:
    """:func:`bench` of each phase's feed (a decoder's decode step and prefill), every session opened once for all
    the phases (each phase gets its share of ``time_budget``)."""
    return _bench(models, [phase.feed for phase in phases], runs, warmup, threads, ort_level, None,
                  time_budget / max(1, len(phases)))


def _bench(models: Sequence[tuple[str, onnx.ModelProto | str]], inputs: Sequence[Mapping[str, np.ndarray]] | None,
           runs: int | None, warmup: int | None, threads: int, ort_level: str, save_optimized: str | None,
           time_budget: float) -> list[BenchResult]:
    if not models:
        raise UsageError("no model to benchmark")
    if ort_level not in ORT_LEVELS:
        raise UsageError(f"--ort-level must be one of {', '.join(ORT_LEVELS)}, not {ort_level!r}")
    if runs is not None and runs < 1:
        raise UsageError("--runs must be at least 1")
    if warmup is not None and warmup < 0:
        raise UsageError("--warmup must be at least 0")
    from gsrewrite.validation.runner import why_unrunnable

    sources = []
    for label, model in models:
        source = resolve_model(model, "benchmarked")
        source.label = f"'{label}'"
        reason = why_unrunnable(source.model)
        if reason is not None:
            raise ValidationError(f"onnxruntime will not run {label}: {reason}")
        sources.append(source)
    given = [dict(feed) for feed in inputs] if inputs is not None else [bench_inputs(sources[0].model)]
    results = []
    with contextlib.ExitStack() as stack:
        sessions = []
        for i, source in enumerate(sources):
            sessions.append(session(source, threads, ort_level, save_optimized if i == 0 else None))
            stack.callback(sessions[-1].close)
        for feed in given:
            feeds = []
            for (label, _), sess in zip(models, sessions, strict=True):
                missing = [name for name in sess.input_names if name not in feed]
                if missing:
                    raise InputDataError(f"{label} takes input {missing[0]!r}, which the first model's inputs lack")
                feeds.append({k: v for k, v in feed.items() if k in set(sess.input_names)})
            timings = [Timing(label) for label, _ in models]
            pairs = list(zip(sessions, feeds, strict=True))
            warmed = _rounds(pairs, None, warmup, DEFAULT_WARMUP, time_budget / 5)
            done = _rounds(pairs, timings, runs, DEFAULT_RUNS, time_budget - warmed[1])
            results.append(BenchResult(timings, done[0], threads, ort_level,
                                       {k: list(v.shape) for k, v in feed.items()}, warmup=warmed[0],
                                       budget_s=time_budget if runs is None else None))
    return results


def _rounds(pairs: list[tuple[Session, dict[str, np.ndarray]]], timings: list[Timing] | None, count: int | None,
            default: int, budget: float) -> tuple[int, float]:
    """Run every model once per round, ``count`` rounds (``None``: up to ``default``, while the next round, at the
    mean round's length, ends within ``budget`` seconds; at least one); record each run's onnxruntime time in
    ``timings``. Returns the rounds run and their wall seconds."""
    start = time.perf_counter()
    done = 0
    while True:
        elapsed = time.perf_counter() - start
        if count is not None and done >= count:
            break
        if count is None and done and (done >= default or elapsed + elapsed / done > budget):
            break
        for index, (sess, one) in enumerate(pairs):
            sess.run(one)
            if timings is not None:
                timings[index].times.append(sess.last_seconds)
        done += 1
    return done, time.perf_counter() - start
