"""Keep freed large buffers in the CLI process (glibc): models are serialized, parsed and copied several times.

glibc's malloc serves large requests with fresh ``mmap`` pages and returns freed heap tops to the system. A
model of a few megabytes is serialized (for onnxruntime, for the output file), parsed and copied several
times per command; each buffer then costs a page fault per 4 KB on first touch, which on a virtual machine
added ~15% to ``optimize``/``simplify`` on the shared BERT models (measured with the same command in fresh
processes: 257 -> 215 ms and 167 -> 144 ms, medians of 7). Keeping buffers up to 32 MB on the heap and not
trimming freed memory below 512 MB lets later buffers reuse pages that are already mapped.

Only the CLI does this (it owns its process); the library leaves the allocator alone. Set
``GSREWRITE_KEEP_MALLOC=1`` to skip it (the same effect: ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` in the environment, which glibc reads at start-up).
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Requests up to this size come from the heap (glibc's maximum for the threshold on 64-bit).
MMAP_THRESHOLD = 32 << 20
#: Freed memory is given back to the system only above this much at the heap's top.
TRIM_THRESHOLD = 512 << 20


def keep_freed_buffers() -> bool:
    """Apply the settings above when running on glibc (once; harmless to repeat). True when applied."""
    if os.environ.get("GSREWRITE_KEEP_MALLOC") == "1" or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...): nothing to tune
        return False
    applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    log.debug("malloc thresholds %s", "raised" if applied else "unchanged (mallopt refused)")
    return applied
