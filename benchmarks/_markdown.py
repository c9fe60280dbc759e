"""Markdown output for the benchmark reports: tables and number formatting."""

from __future__ import annotations

import math
import platform
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

MISSING = "—"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table; ``None`` cells print as an em dash."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(MISSING if cell is None else str(cell) for cell in row) + " |")
    return "\n".join(lines)


def seconds(value: float | None) -> str | None:
    """Seconds with a unit that keeps 3 significant digits (µs, ms or s)."""
    if value is None or math.isnan(value):
        return None
    if value < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s"


def ratio(value: float | None) -> str | None:
    """A ratio such as ``2.41x``."""
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return f"{value:.2f}x"


def sci(value: float | None) -> str | None:
    """A small magnitude (a max abs diff) in scientific notation."""
    if value is None or math.isnan(value):
        return None
    return "0" if value == 0 else f"{value:.1e}"


def size(num_bytes: int | None) -> str | None:
    """A file size in KB or MB."""
    if num_bytes is None:
        return None
    if num_bytes < 1 << 20:
        return f"{num_bytes / 1024:.1f} KB"
    return f"{num_bytes / (1 << 20):.2f} MB"


def machine_line() -> str:
    """One line saying when and where the numbers were taken."""
    import onnx
    import onnxruntime

    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"Measured {stamp} on {platform.machine()} ({_cpus()} CPUs), Python {platform.python_version()}, "
            f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, gsrewrite {_revision()}.")


def _revision() -> str:
    """The commit of the gsrewrite checkout being measured, marked when its files differ from it.

    ``GSREWRITE_BENCH_REVISION`` overrides it (for a measured copy of a working tree that is not a checkout).
    """
    import os
    import subprocess
    from pathlib import Path

    if os.environ.get("GSREWRITE_BENCH_REVISION"):
        return os.environ["GSREWRITE_BENCH_REVISION"]
    import gsrewrite

    root = Path(gsrewrite.__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "gsrewrite", "patterns", "plugins"],
                               cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(no git checkout)"
    return f"{head}{' + uncommitted changes' if dirty else ''}"


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
