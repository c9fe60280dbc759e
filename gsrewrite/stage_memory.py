"""Each stage's peak memory beside its time: ``with stage("validating"): ...`` is :func:`gsrewrite.stages.stage`
(timed, logged) and, when the ``gsrewrite.stages`` logger shows INFO (``-v``), also logs
``stage validating: peak RSS 2.31 GB (0.99x weights)`` at its end.

The peak is exact when the stage raised the process's high-water mark (``getrusage``'s ``ru_maxrss``, which the
kernel keeps); otherwise it is the highest resident size a sampler thread read (``/proc/self/statm`` every
:data:`SAMPLE_SECONDS`) while the stage ran: a peak shorter than that between two samples can be missed, never
overstated. ``weights(nbytes)`` binds the request's weight bytes, the unit of the ratio (a context variable: a
request in another thread sees its own). Without INFO logging nothing is sampled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar

from gsrewrite.stages import log
from gsrewrite.stages import stage as timed_stage

#: seconds between two reads of the resident size while a stage runs
SAMPLE_SECONDS = 0.05
_WEIGHTS: ContextVar[int | None] = ContextVar("gsrewrite_stage_weights", default=None)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@contextlib.contextmanager
def weights(nbytes: int | None) -> Iterator[None]:
    """Stages inside report their peak against ``nbytes`` (the request's weight bytes); None: no ratio."""
    token = _WEIGHTS.set(nbytes)
    try:
        yield
    finally:
        _WEIGHTS.reset(token)


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


class _Sampler:
    """The highest resident size read while it runs (a daemon thread)."""

    def __init__(self) -> None:
        self.highest = current_rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gsrewrite-rss", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.highest = max(self.highest, current_rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.highest, current_rss())


def release() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``): what a finished step freed
    (onnxruntime's session, a candidate's payloads) then leaves the resident size instead of lingering in the
    heap's free lists where the next step's different-sized blocks may not fit. A no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to trim
        pass


def describe(peak: int, weight_bytes: int | None) -> str:
    """``peak RSS 2.31 GB (0.99x weights)``."""
    ratio = f" ({peak / weight_bytes:.2f}x weights)" if weight_bytes else ""
    return f"peak RSS {peak / 1e9:.2f} GB{ratio}"


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """:func:`gsrewrite.stages.stage`, and at INFO the stage's peak resident memory (see the module)."""
    if not log.isEnabledFor(logging.INFO):
        try:
            with timed_stage(name):
                yield
        finally:
            release()
        return
    before = peak_rss()
    sampler = _Sampler()
    try:
        with timed_stage(name):
            yield
    finally:
        release()
        sampled = sampler.stop()
        after = peak_rss()
        peak = after if after > before else sampled
        log.info("stage %s: %s", name, describe(peak, _WEIGHTS.get()))
