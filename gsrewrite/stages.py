"""Named stages of long work (load, simplify, rewrite, validate, save), timed and logged.

``with stage("validating"): ...`` logs ``validating...`` when it starts and ``validating: 1.23 s`` when it
ends, on the ``gsrewrite.stages`` logger at INFO level: ``-v`` shows the timings, and the CLI's progress display
shows the current stage's name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("gsrewrite.stages")


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the work inside; its name and duration go to the ``gsrewrite.stages`` logger."""
    log.info("%s...", name)
    start = time.perf_counter()
    try:
        yield
    finally:
        log.info("%s: %.2f s", name, time.perf_counter() - start)
