"""Timing helpers shared by the benchmarks: best-of-N wall time, the onnx.load + onnx.save baseline, profiles."""

from __future__ import annotations

import cProfile
import gc
import io
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``fn`` once (after a full garbage collection); return (seconds, result)."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The smallest wall time of ``repeat`` runs of ``fn`` (timeit's convention), and the last result."""
    times, result = [], None
    for _ in range(max(1, repeat)):
        seconds, result = timed(fn)
        times.append(seconds)
    return min(times), result


def median_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The median wall time of ``repeat`` runs of ``fn``, and the last result."""
    times, result = [], None
    for _ in range(max(1, repeat)):
        seconds, result = timed(fn)
        times.append(seconds)
    return statistics.median(times), result


def load_save_seconds(path: str | os.PathLike, repeat: int = 3) -> float:
    """Median wall time of ``onnx.load(path)`` + ``onnx.save(model, tmp)``: the cost of merely touching a model."""
    import onnx

    def once() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            onnx.save(onnx.load(os.fspath(path)), os.path.join(tmp, "copy.onnx"))

    once()  # warm the page cache, as every measured tool run finds it warm
    times = [timed(once)[0] for _ in range(max(1, repeat))]
    return statistics.median(times)


def profile(fn: Callable[[], Any], top: int = 20) -> list[tuple[str, int, float, float]]:
    """cProfile ``fn``; the ``top`` functions by own time as (function, calls, own s, cumulative s)."""
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (file, line, name), (_cc, calls, own, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((f"{_short(file)}:{line}({name})", calls, own, cumulative))
    rows.sort(key=lambda r: r[2], reverse=True)
    return rows[:top]


def _short(file: str) -> str:
    """A profile entry's file without the machine-specific prefix."""
    if "site-packages/" in file:
        return file.split("site-packages/", 1)[1]
    parts = file.split("/")
    for anchor in ("gsrewrite", "benchmarks"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor):])
    return os.path.basename(file) if file.startswith("/") else file
