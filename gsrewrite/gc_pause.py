"""``gc_paused``: run graph work with the cyclic garbage collector off (shared by the engine and the simplifier)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (it is superlinear in the number of live objects: 100k-node graphs)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
