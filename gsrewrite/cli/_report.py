"""Every command's report, one format: the library's :class:`~gsrewrite.reporting.Report` blocks (tables and lines)
rendered here, rich tables on a terminal and aligned plain text elsewhere, or the result's data as JSON.

The rewriting commands (apply, optimize, simplify), compress and ``optimize --tune``/``--compress`` all print their
results through :func:`show` and :func:`emit`; ``-q`` prints only the "Wrote" line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console

from gsrewrite.cli._output import console, emit_json, table
from gsrewrite.reporting import Report, Table, printable, size_text


def show_result(result: Any, model: str, as_json: bool, verbosity: int, *, explain: bool = False,
                wrote: str | None = None, size_after: int | None = None, report: str | None = None) -> None:
    """A rewrite's report (with each pattern's near miss when ``explain``), or its JSON. ``size_after``: the bytes
    written (default: the result serialized); ``wrote``: the output path, when one was written; ``report``: where
    the HTML report goes (written here, after the model)."""
    from gsrewrite.model_io import serialized_size, stored_size

    size_before = stored_size(model, result.original)
    if size_after is None:
        size_after = serialized_size(result.model)
    command = click.get_current_context().info_name or "optimize"
    page = write_html(result, report, model=model, output=wrote, command=command, size_before=size_before,
                      size_after=size_after)
    if as_json:
        emit(result.to_dict(), wrote, size_before, size_after, report)
        return
    show(result.report_blocks(verbose=verbosity > 0, size_before=size_before, size_after=size_after), wrote,
         size_after, verbosity)
    if explain and verbosity >= 0:
        print_explain(console(), result)
    wrote_report(report, page)


def check_report(report: str | None, jobs: Sequence[Any], others: Sequence[tuple[str, str | None]] = (),
                 read: Sequence[tuple[str, str | None]] = ()) -> None:
    """Before any work: ``--report`` names one file for one model, never the input (or a file it reads), nor
    another output of the command (``others``: (what, path)), nor a file the command reads (``read``)."""
    if report is None:
        return
    from gsrewrite.errors import UsageError
    from gsrewrite.model_io import check_output_path
    from gsrewrite.model_io.saving import check_distinct_outputs, check_not_read

    if len(jobs) != 1:
        raise UsageError("--report writes one file: give one model (run once per model for several)")
    job = jobs[0]
    check_output_path(report, input_path=job.model)
    check_not_read(report, read)
    outputs = [(f"the result of '{job.model}'", job.output), *((w, p) for w, p in others if p is not None)]
    check_distinct_outputs([*outputs, ("the report (--report)", report)])


def write_html(result: Any, report: str | None, **context: Any) -> int | None:
    """Write ``result``'s HTML report to ``report`` (nothing when None); the bytes written."""
    if report is None:
        return None
    from gsrewrite.pipelines.reported import write_report

    return write_report(result, report, **context)


def wrote_report(report: str | None, size: int | None) -> None:
    """The line saying where the HTML report went."""
    if report is not None:
        console().print(f"Wrote report {report} ({size_text(size or 0)})", markup=False, highlight=False,
                        soft_wrap=True)


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


def emit(data: dict[str, Any], wrote: str | None, size_before: int | None, size_after: int | None,
         report: str | None = None) -> None:
    """The JSON report: the result's data, the output path, the sizes before and after (bytes) and, when one was
    written, the HTML report's path."""
    extra = {"report": report} if report is not None else {}
    emit_json(data | {"output": wrote, "size_before": size_before, "size_after": size_after} | extra)


def print_explain(out: Console, result: Any) -> None:
    """Per pattern: matches and the verdict ``optimize`` gives (applied, dropped by validation, skipped by a
    policy, or why it did not match: the deepest near miss, a match the engine refused)."""
    verdicts = result.verdicts()
    rows = [(name, result.counts.get(name, 0), verdicts[name]) for name in result.patterns]
    out.print(table("Explain: matches and the verdict per pattern", ("pattern", "matches", "verdict"), rows))
