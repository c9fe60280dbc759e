"""Write the output file on a worker thread while the caller's thread computes the report.

Writing a new multi-megabyte file is kernel time (page-cache allocation: ~15 ms for 8 MB on the test VM) during
which Python holds no lock; the statistics of the before/after table are Python work on the model protos. The
two overlap; the report is printed only once the file is in place (or the write's error is raised).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def save_while(work: Callable[[], T], model: Any, output: str, **save_options: Any) -> tuple[int, T]:
    """``(save_model(model, output, **save_options), work())``, the save on a worker thread."""
    from gsrewrite.model_io import save_model

    outcome: dict[str, Any] = {}

    def save() -> None:
        try:
            outcome["size"] = save_model(model, output, **save_options)
        except BaseException as exc:  # raised in the caller's thread below
            outcome["error"] = exc

    worker = threading.Thread(target=save, name="gsrewrite-save")
    worker.start()
    try:
        value = work()
    finally:
        worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["size"], value
