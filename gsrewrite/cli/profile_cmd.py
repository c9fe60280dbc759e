"""``gsrewrite profile``: MACs, parameters, weight and activation bytes, sparsity per node and op type."""

from __future__ import annotations

import csv
import io
from typing import Any

import click

from gsrewrite.cli._options import input_shape_option, input_shapes, json_option
from gsrewrite.cli._output import console, emit_json, human_bytes, table, working


@click.command()
@click.argument("model")
@input_shape_option
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="table for people, csv (one row per node) or json for scripts.")
@json_option
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True,
              help="Nodes listed by MACs (0: all; json and csv list all nodes unless given).")
@click.option("--plot", "plot", default=None, metavar="FILE",
              help="Write charts: FILE.html (no dependency), FILE.png or FILE.svg (matplotlib).")
@click.option("--force", is_flag=True, help="Overwrite the --plot file if it exists.")
@click.option("--sparsity/--no-sparsity", default=True, show_default=True,
              help="Read every weight for its zeros (--no-sparsity: MACs and sizes without reading a weight).")
@click.pass_context
def profile(ctx: click.Context, model: str, input_shape: tuple[str, ...], fmt: str, as_json: bool, top: int,
            plot: str | None, force: bool, sparsity: bool) -> None:
    """Profile MODEL: per node MACs (1 MAC = 2 FLOPs), parameters, weight bytes, activation bytes and weight
    sparsity; totals and sums per op type. Dynamic dims stay symbolic (totals are polynomials in them) unless
    --input-shape gives sizes."""
    import os

    from gsrewrite.errors import OutputError
    from gsrewrite.model_io import check_output_path

    given = input_shapes(input_shape)

    fmt = "json" if as_json else fmt
    if plot is not None:
        if os.path.exists(plot) and not force:
            raise OutputError(f"{plot} exists; pass --force to overwrite it")
        check_output_path(plot, input_path=model)
    from gsrewrite.profiling.analysis import profile as profile_path

    with working(f"Profiling {os.path.basename(model)}"):
        result = profile_path(model, given, sparsity=sparsity)
    if plot is not None:
        _write_plot(result, plot, top or 15)
    top_given = ctx.get_parameter_source("top") != click.core.ParameterSource.DEFAULT
    if fmt == "json":
        emit_json(result.to_dict(top if top_given and top else None) | ({"plot": plot} if plot else {}))
    elif fmt == "csv":
        click.echo(_csv(result.to_dict(top if top_given and top else None)["nodes"]), nl=False)
    else:
        _tables(result, top, sparsity)
        if plot is not None:
            console().print(f"Wrote {plot}", markup=False, highlight=False)


def _write_plot(result: Any, path: str, top: int) -> None:
    from gsrewrite.model_io.saving import atomic_files
    from gsrewrite.profiling.plot import render

    data = render(result, path, top)
    with atomic_files() as create:
        create(path).write(data)


def _csv(nodes: list[dict[str, Any]]) -> str:
    """One row per node, text quoted; a name a spreadsheet would run as a formula is kept as text (``csv_cell``).
    The names are written as they are, except on a terminal, where their control characters are escaped (as
    ``ls`` quotes them there): a CSV on a terminal is read, not stored."""
    import sys

    from gsrewrite.reporting import csv_cell, printable

    shown = printable if sys.stdout.isatty() else str
    buffer = io.StringIO()
    columns = ["name", "op_type", "macs", "params", "weight_bytes", "activation_bytes", "sparsity",
               "block_sparsity"]
    # text quoted, numbers not: a name holding a carriage return stays in its cell (the minimal quoting quotes only
    # what holds the line terminator, so such a name split its row)
    writer = csv.DictWriter(buffer, columns, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    for node in nodes:
        values = {c: node.get(c) for c in columns}
        writer.writerow({c: "" if v is None else csv_cell(shown(v) if isinstance(v, str) else v)
                         for c, v in values.items()})
    return buffer.getvalue()


def _count(value: Any) -> str:
    if value is None:
        return "?"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _percent(part: Any, total: Any) -> str:
    if isinstance(part, int) and isinstance(total, int) and total:
        return f"{100 * part / total:.1f}%"
    return ""


def _tables(result: Any, top: int, read_weights: bool = True) -> None:
    out = console()
    total = result.macs
    sparsity = result.weights.sparsity
    rows = [("MACs", _count(total)), ("FLOPs", _count(None if total is None else total * 2)),
            ("parameters", f"{result.params:,}"), ("weight bytes", human_bytes(result.weight_bytes)),
            ("activation bytes", _bytes(result.activation_bytes)),
            ("weight sparsity", ("?" if read_weights else "not read (--no-sparsity)") if sparsity is None else
             f"{100 * sparsity:.2f}% zeros, {100 * (result.weights.block_sparsity or 0):.2f}% zero 1x4 blocks")]
    if result.bindings:
        rows.append(("sizes", ", ".join(f"{k}={v}" for k, v in sorted(result.bindings.items()))))
    if result.unprofiled:
        rows.append(("MACs unknown", ", ".join(f"{k} x{v}" for k, v in result.unprofiled.items())))
    unknown_symbols = result.unknown_symbols()
    if unknown_symbols:
        rows.append(("unknown dims", f"{', '.join(unknown_symbols)}: no input gives them (counts in them are "
                                     "known only when the model runs)"))
    out.print(table("Total", ["", "value"], rows))
    by_type = result.by_op_type()
    out.print(table("By op type", ["op", "count", "MACs", "share", "params", "activation bytes"], [
        (op, t.count, _count(t.macs), _percent(t.macs, total), f"{t.params:,}", _bytes(t.activation_bytes))
        for op, t in by_type.items()]))
    nodes = result.top(top) if top else result.nodes
    out.print(table(f"Top {len(nodes)} nodes by MACs", ["node", "op", "MACs", "share", "params"], [
        (n.name, n.op_key, _count(n.macs), _percent(n.macs, total), f"{n.params:,}") for n in nodes]))


def _bytes(value: Any) -> str:
    if value is None:
        return "?"
    return human_bytes(value) if isinstance(value, int) else f"{value} B"
