"""``gsrewrite memory``: activation memory planning (naive total, planned arena, lower bound)."""

from __future__ import annotations

import click

from gsrewrite.cli._options import input_shape_option, input_shapes, json_option
from gsrewrite.cli._output import console, emit_json, human_bytes, table


@click.command()
@click.argument("model")
@input_shape_option
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True,
              help="Largest buffers listed with their offsets.")
@json_option
def memory(model: str, input_shape: tuple[str, ...], top: int, as_json: bool) -> None:
    """Plan MODEL's activation memory: liveness over the topological order, views and in-place ops sharing
    buffers, offsets in one arena. Shows the naive total, the arena, and the lower bound (the most bytes live at
    one step). Symbols not given with --input-shape take validation's sample sizes."""
    from gsrewrite.profiling.analysis import plan_memory

    plan = plan_memory(model, input_shapes(input_shape))
    if as_json:
        emit_json(plan)
        return
    out = console()
    # with tensors of unknown size the plan leaves them out: every count is then at least what it says
    least = "" if plan.complete else "at least "
    rows = [("sizes", ", ".join(f"{k}={v}" for k, v in sorted(plan.bindings.items())) or "static"),
            ("naive (no reuse)", least + human_bytes(plan.naive_bytes)),
            ("planned arena", f"{least}{human_bytes(plan.arena_bytes)} ({plan.strategy})"),
            ("lower bound", f"{least}{human_bytes(plan.lower_bound_bytes)} at "
                            f"{plan.peak_node or f'step {plan.peak_step}'}"),
            ("arena / lower bound", f"{plan.ratio_to_bound:.3f}"),
            ("graph inputs / outputs", f"{least if plan.unknown_io else ''}{human_bytes(plan.input_bytes)} / "
                                       f"{least if plan.unknown_io else ''}{human_bytes(plan.output_bytes)}"),
            ("weights", human_bytes(plan.weight_bytes))]
    for label, names in (("size unknown", plan.unknown), ("input/output size unknown", plan.unknown_io),
                         ("inside If/Loop/Scan bodies", plan.in_subgraphs)):
        if names:
            more = ", ..." if len(names) > 3 else ""
            rows.append((label, f"{len(names)} tensor(s), not planned: {', '.join(names[:3])}{more}"))
    out.print(table("Memory plan", ["", "value"], rows))
    if plan.unknown or plan.unknown_io:
        count = len(plan.unknown) + len(plan.unknown_io)
        out.print(f"Incomplete plan: {count} tensor(s) have a size unknown before the model runs (their rank or a "
                  "dim no input gives); the byte counts above leave them out and are lower bounds.", markup=False,
                  highlight=False)
    if plan.in_subgraphs:
        out.print(f"Incomplete plan: {len(plan.in_subgraphs)} tensor(s) inside If/Loop/Scan bodies are not planned "
                  "(one body runs at a time, beside the graph's live buffers); the byte counts above are lower "
                  "bounds.", markup=False, highlight=False)
    largest = sorted(plan.buffers, key=lambda b: -b.size)[:top]
    out.print(table(f"Largest {len(largest)} buffers", ["tensor", "offset", "size", "steps"], [
        (b.tensor, f"{b.offset:,}", human_bytes(b.size), f"{b.start}-{b.end}") for b in largest]))
