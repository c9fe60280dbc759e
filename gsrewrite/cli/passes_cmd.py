"""``gsrewrite passes``: the simplify passes plugins registered (built-ins included)."""

from __future__ import annotations

import click

from gsrewrite.cli._options import json_option
from gsrewrite.cli._output import console, emit_json, table


@click.group()
def passes() -> None:
    """Simplify passes (run by 'gsrewrite simplify', chosen with --only/--skip)."""


@passes.command("list")
@json_option
def list_passes(as_json: bool) -> None:
    """List every registered pass in the order simplify runs them: default or opt-in, provider, description."""
    from gsrewrite.simplifier.registry import default_pass_registry, is_default

    registry = default_pass_registry()
    rows = [{"name": p.name, "default": is_default(p), "provider": registry.provider(p.name),
             "description": p.description} for p in registry.pipeline()]
    if as_json:
        emit_json(rows)
        return
    cells = [(r["name"], "yes" if r["default"] else "opt-in", r["provider"], r["description"]) for r in rows]
    console().print(table("Simplify passes (in pipeline order)", ("pass", "default", "provider", "description"), cells))
