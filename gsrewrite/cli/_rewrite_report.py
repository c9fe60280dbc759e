"""Human-readable reports of a rewrite: the before/after table, pattern counts, explanations."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from gsrewrite.cli._output import human_bytes, table


def print_summary(out: Console, result: Any, size_before: int, size_after: int) -> None:
    """Op-type table (changed rows), matches per pattern, sizes and the validation verdict."""
    rows = []
    for op in sorted(set(result.before) | set(result.after)):
        before, after = result.before.get(op, 0), result.after.get(op, 0)
        if before != after:
            rows.append((op, before, after, f"{after - before:+d}"))
    total_before, total_after = sum(result.before.values()), sum(result.after.values())
    rows.append(("total nodes", total_before, total_after, f"{total_after - total_before:+d}"))
    out.print(table("Nodes by op type (changed)", ("op", "before", "after", "change"), rows))
    if result.counts:
        out.print(table("Rewrites per pattern", ("pattern", "matches"), sorted(result.counts.items())))
    else:
        out.print("No pattern matched: the model is unchanged.")
    out.print(f"Size: {human_bytes(size_before)} -> {human_bytes(size_after)}")
    for name, why in result.dropped.items():
        out.print(f"[yellow]Dropped {name}[/yellow]: its rewrites fail validation ({why})")
    for name, why in result.skipped.items():
        out.print(f"Skipped {name}: {why}")
    if result.validation is not None:
        verdict = "[green]OK[/green]" if result.validation.ok else "[red]FAILED[/red]"
        out.print(f"Validation: {verdict} {result.validation.summary().removeprefix('OK: ').removeprefix('FAILED: ')}")


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
