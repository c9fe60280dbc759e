"""The report of every rewriting command (apply, optimize, simplify): one format, rendered for people or JSON.

The blocks come from the library (:mod:`gsrewrite.reporting`, what ``result.report()`` prints as plain text);
here they are rendered with rich on a terminal. ``-q`` prints only the "Wrote" line.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from gsrewrite.cli._output import console, emit_json, table
from gsrewrite.reporting import Report, Table, printable, size_text


def show(report: Report, wrote: str | None, size: int | None, verbosity: int) -> None:
    """Print ``report`` (unless quiet) and the one line saying where the output went."""
    out = console()
    if verbosity >= 0:
        render(out, report)
    if wrote is not None:
        out.print(f"Wrote {wrote} ({size_text(size or 0)})", markup=False, highlight=False, soft_wrap=True)


def render(out: Console, report: Report) -> None:
    for block in report.blocks:
        if isinstance(block, Table):
            out.print(table(block.title, block.columns, block.rows))
        elif block.startswith("Dropped") or (block.startswith("Validation:") and
                                             not block.startswith("Validation: OK")):
            style = "yellow" if block.startswith("Dropped") else "red"
            out.print(printable(block), style=style, markup=False, highlight=False, soft_wrap=True)
        else:
            out.print(printable(block), markup=False, highlight=False, soft_wrap=True)


def emit(data: dict[str, Any], wrote: str | None, size_before: int | None, size_after: int | None) -> None:
    """The JSON report, with the output path and sizes."""
    emit_json(data | {"output": wrote, "size_before": size_before, "size_after": size_after})


def print_explain(out: Console, result: Any) -> None:
    """Per pattern: matches, or why not (skipped, no candidate anchor, the deepest near miss)."""
    rows = []
    for name in result.patterns:
        count = result.counts.get(name, 0)
        if name in result.skipped:
            why = f"skipped: {result.skipped[name]}"
        elif name in result.near_misses:
            why = result.near_misses[name].sentence()
        elif not result.attempts.get(name):
            why = "no candidate node in the graph" if not count else ""
        else:
            why = ""
        rows.append((name, count, why))
    out.print(table("Explain: matches and the deepest near miss per pattern", ("pattern", "matches", "why not"),
                    rows))
