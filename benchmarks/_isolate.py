"""Run one _worker.py command in its own process and read its JSON result; crashes become results.

A peer that aborts in C++ (SIGABRT, SIGSEGV) or hangs ends only its own process: the caller gets
``{"error": "crashed (SIGABRT): <last stderr line>"}`` or ``{"error": "timed out after N s"}``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().with_name("_worker.py")


def run(command: str, args: list[str], timeout: float) -> dict[str, Any]:
    """``python _worker.py COMMAND RESULT ARGS...``; the parsed result, or an ``error`` entry."""
    fd, name = tempfile.mkstemp(prefix=f"bench-{command}-", suffix=".json")
    os.close(fd)
    result = Path(name)
    result.unlink()
    try:
        proc = subprocess.run([sys.executable, str(WORKER), command, str(result), *args],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        result.unlink(missing_ok=True)
        return {"error": f"timed out after {timeout:.0f} s"}
    if result.exists():
        data = json.loads(result.read_text())
        result.unlink()
        return data
    return {"error": f"{_death(proc.returncode)}: {_last_line(proc.stderr)}"}


def _death(code: int) -> str:
    if code < 0:
        try:
            return f"crashed ({signal.Signals(-code).name})"
        except ValueError:
            return f"crashed (signal {-code})"
    return f"exited {code} without a result"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
