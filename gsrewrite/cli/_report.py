"""Every command's report, one format: the library's :class:`~gsrewrite.reporting.Report` blocks (tables and lines)
rendered here, rich tables on a terminal and aligned plain text elsewhere, or the result's data as JSON.

The rewriting commands (apply, optimize, simplify), compress and ``optimize --tune``/``--compress`` all print their
results through :func:`show` and :func:`emit`; ``-q`` prints only the "Wrote" line.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from gsrewrite.cli._output import console, emit_json, table
from gsrewrite.reporting import Report, Table, printable, size_text


def show_result(result: Any, model: str, as_json: bool, verbosity: int, *, explain: bool = False,
           wrote: str | None = None, size_after: int | None = None) -> None:
    """A rewrite's report (with each pattern's near miss when ``explain``), or its JSON. ``size_after``: the bytes
    written (default: the result serialized); ``wrote``: the output path, when one was written."""
    from gsrewrite.model_io import serialized_size, stored_size

    size_before = stored_size(model, result.original)
    if size_after is None:
        size_after = serialized_size(result.model)
    if as_json:
        emit(result.to_dict(), wrote, size_before, size_after)
        return
    show(result.report_blocks(verbose=verbosity > 0, size_before=size_before, size_after=size_after), wrote,
         size_after, verbosity)
    if explain and verbosity >= 0:
        print_explain(console(), result)


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
    """The JSON report: the result's data, the output path and the sizes before and after (bytes)."""
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
