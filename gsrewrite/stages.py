"""Named stages of long work (load, simplify, rewrite, validate, save), timed, measured and logged.

``with stage("validating"): ...`` logs ``validating...`` when it starts and, when it ends,
``validating: 1.23 s, peak RSS 2.31 GB (0.99x weights)`` on the ``gsrewrite.stages`` logger at INFO level: ``-v``
shows each stage's time and peak resident memory, and the CLI's progress display shows the current stage's name.

The peak is the process's high-water mark (``getrusage``'s ``ru_maxrss``, kept by the kernel) when the stage raised
it, else the highest resident size a sampler thread read (``/proc/self/statm`` every :data:`SAMPLE_SECONDS`) while
the stage ran: a peak shorter than that between two samples can be missed, never overstated. Nothing is sampled
when the logger does not show INFO. ``weights(nbytes)`` binds the request's weight bytes, the unit of the ratio (a field
of the request: :mod:`gsrewrite.request`; a request in another thread sees its own).

:func:`release_memory` collects garbage and hands the C heap's free pages back to the system, at the few steps where
that measurably lowers a command's peak (each call site quotes its saving; benchmarks/results/pipeline_memory.md).
It acts only when :func:`set_memory_release` turned it on: the CLI does (the process is gsrewrite's); a library call
leaves the heap of the application it runs in alone unless the application asks for it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import resource
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from gsrewrite.request import bound, current

log = logging.getLogger("gsrewrite.stages")

#: seconds between two reads of the resident size while a stage runs
SAMPLE_SECONDS = 0.05
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the work inside and, at INFO, find its peak resident memory; both go to the ``gsrewrite.stages``
    logger."""
    log.info("%s...", name)
    start = time.perf_counter()
    measured = log.isEnabledFor(logging.INFO)
    before = peak_rss() if measured else 0
    sampler = _Sampler() if measured else None
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        if sampler is None:
            log.info("%s: %.2f s", name, seconds)
        else:
            sampled = sampler.stop()
            after = peak_rss()
            peak = after if after > before else sampled
            log.info("%s: %.2f s, %s", name, seconds, describe(peak, current().weight_bytes))


@contextlib.contextmanager
def weights(nbytes: int | None) -> Iterator[None]:
    """Stages inside report their peak against ``nbytes`` (the request's weight bytes); None: no ratio."""
    with bound(weight_bytes=nbytes):
        yield


def describe(peak: int, weight_bytes: int | None) -> str:
    """``peak RSS 2.31 GB (0.99x weights)``."""
    ratio = f" ({peak / weight_bytes:.2f}x weights)" if weight_bytes else ""
    return f"peak RSS {peak / 1e9:.2f} GB{ratio}"


def current_rss() -> int:
    """The process's resident bytes now (``/proc/self/statm``; elsewhere the high-water mark)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return peak_rss()


def peak_rss() -> int:
    """The process's high-water mark of resident bytes so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


#: whether :func:`release_memory` acts (:func:`set_memory_release`): off for the library, on in the CLI
_release = False


def set_memory_release(on: bool = True) -> None:
    """Let :func:`release_memory` collect garbage and trim the C heap at its call sites (for the whole process). The
    CLI turns it on; an application embedding gsrewrite may, when the memory gsrewrite's steps free should leave
    the process at once (it costs a full garbage collection of the application's heap at each site)."""
    global _release
    _release = on


def release_memory() -> None:
    """When :func:`set_memory_release` is on: a garbage collection (an onnx-graphsurgeon graph is a web of reference
    cycles, so a finished step's graph and arrays are otherwise freed only whenever the collector next runs), then
    glibc's ``malloc_trim``: what a finished step freed (onnxruntime's sessions, a candidate's payloads) leaves the
    resident size instead of lingering in the heap's free lists, where the next step's different-sized blocks may
    not fit (a no-op elsewhere). Called only where a measurement showed it lowers the peak."""
    if not _release:
        return
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, looked up once; None elsewhere (not Linux, or musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


class _Sampler:
    """The highest resident size read while it runs (a daemon thread)."""

    def __init__(self) -> None:
        self.highest = current_rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gsrewrite-stage-memory", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.highest = max(self.highest, current_rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.highest, current_rss())
