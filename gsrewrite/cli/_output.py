"""Output helpers shared by the subcommands: JSON for scripts, rich tables for people."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gsrewrite.reporting import cell_text, is_number, plain_table, printable, size_text


def _default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def to_json(data: Any) -> str:
    """Serialize report data; NaN/Inf become strings so the output stays valid JSON."""
    return json.dumps(_sanitize(data), indent=2, default=_default, allow_nan=False)


def _sanitize(data: Any) -> Any:
    if isinstance(data, float) and (data != data or data in (float("inf"), float("-inf"))):
        return str(data)
    if isinstance(data, dict):
        return {str(k): _sanitize(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_sanitize(v) for v in data]
    if hasattr(data, "to_dict"):
        return _sanitize(data.to_dict())
    return data


def emit_json(data: Any) -> None:
    click.echo(to_json(data))


def console() -> Console:
    """A console on stdout; plain text (no colour codes, no wrapping: one line per line) when stdout is not a
    terminal."""
    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, highlight=False, emoji=False, soft_wrap=not tty, width=None if tty else 120)


#: work shorter than this shows no progress display
PROGRESS_AFTER_SECONDS = 2.0


@contextlib.contextmanager
def working(message: str) -> Iterator[None]:
    """A progress display for long work, on an interactive terminal only (elsewhere nothing: no refresh thread
    waking up to draw what nobody sees): after :data:`PROGRESS_AFTER_SECONDS`, a spinner with ``message`` and
    the stage running now (from :mod:`gsrewrite.stages`)."""
    out = console()
    if not out.is_terminal:
        yield
        return
    status = out.status(message, spinner="dots")
    handler = _StageText(status, message)
    stages = logging.getLogger("gsrewrite.stages")
    stages.addHandler(handler)
    level = stages.level
    if not stages.isEnabledFor(logging.INFO):
        stages.setLevel(logging.INFO)
        stages.propagate = False  # the display wants the stages; the log (no -v) does not
    timer = threading.Timer(PROGRESS_AFTER_SECONDS, status.start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        status.stop()
        stages.removeHandler(handler)
        stages.setLevel(level)
        stages.propagate = True


class _StageText(logging.Handler):
    """Shows the stage that started last next to the spinner."""

    def __init__(self, status: Any, message: str) -> None:
        super().__init__(logging.INFO)
        self._status, self._message = status, message

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.endswith("..."):
            self._status.update(f"{self._message} {text}")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table | Text:
    """A rich table on a terminal, else the same table as plain aligned text (what logs and pipes want, and
    far cheaper to render: benchmarks/results/code_figures.md); numeric-looking columns are right-aligned."""
    rows = list(rows)
    if not sys.stdout.isatty():
        return Text(plain_table(title, columns, rows))
    t = Table(title=None if title is None else escape(printable(title)), show_lines=False, title_justify="left")
    rows = [list(map(_cell, r)) for r in rows]
    for i, col in enumerate(columns):
        numeric = bool(rows) and all(is_number(r[i]) for r in rows if i < len(r) and r[i] != "")
        t.add_column(col, justify="right" if numeric else "left")
    for r in rows:
        t.add_row(*r)
    return t


def _cell(value: Any) -> str:
    """Cell text (:func:`~gsrewrite.reporting.cell_text`: control characters escaped); rich markup in data (e.g.
    a shape '[batch, 4]') is escaped, never interpreted."""
    return escape(cell_text(value))


def human_bytes(n: float) -> str:
    """Bytes in binary units, labelled as such (KiB, MiB, GiB)."""
    return size_text(n)
