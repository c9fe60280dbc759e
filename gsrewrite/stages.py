"""Named stages of long work (load, simplify, rewrite, validate, save), timed, measured and logged.

``with stage("validating"): ...`` logs ``validating...`` when it starts and ``validating: 1.23 s, peak RSS 2.27 GB``
when it ends, on the ``gsrewrite.stages`` logger at INFO level: ``-v`` shows the timings and each stage's peak
resident memory (sampled every 50 ms by a thread that lives as long as the stage, plus the process's high-water
mark when the stage raised it), and the CLI's progress display shows the current stage's name.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("gsrewrite.stages")

_STATUS = "/proc/self/status"
#: seconds between two samples of the resident memory
SAMPLE_SECONDS = 0.05


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the work inside and sample its peak RSS; name, duration and peak go to the ``gsrewrite.stages`` logger
    (the sampling runs only when that logger shows INFO)."""
    log.info("%s...", name)
    start = time.perf_counter()
    sampler = _Sampler() if log.isEnabledFor(logging.INFO) else None
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        peak = sampler.stop() if sampler is not None else None
        if peak:
            log.info("%s: %.2f s, peak RSS %.2f GB", name, seconds, peak / 1e9)
        else:
            log.info("%s: %.2f s", name, seconds)


def memory_status() -> tuple[int, int] | None:
    """(current RSS, the process's high-water RSS) in bytes, from /proc; None where there is no /proc."""
    try:
        with open(_STATUS) as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


class _Sampler:
    """The highest RSS seen from now until :meth:`stop`."""

    def __init__(self) -> None:
        first = memory_status()
        self._high_before = first[1] if first else 0
        self.peak = first[0] if first else 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gsrewrite-stage-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(SAMPLE_SECONDS):
            status = memory_status()
            if status is not None:
                self.peak = max(self.peak, status[0])

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        status = memory_status()
        if status is None:
            return 0
        current, high = status
        # a peak between two samples shows in the high-water mark when this stage raised it
        return max(self.peak, current, high if high > self._high_before else 0)
