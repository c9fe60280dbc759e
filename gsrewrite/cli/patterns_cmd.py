"""``gsrewrite patterns list|show``: the registered patterns and their templates."""

from __future__ import annotations

from typing import Any

import click

from gsrewrite.cli._options import json_option
from gsrewrite.cli._output import console, emit_json, table
from gsrewrite.reporting import printable


@click.group()
def patterns() -> None:
    """List registered patterns or show one."""


@patterns.command("list")
@json_option
def list_patterns(as_json: bool) -> None:
    """Every registered pattern: family, targets, devices, variants, size and where it comes from."""
    from gsrewrite.patterns import default_registry

    registry = default_registry()
    entries = [p.to_dict() | {"provider": registry.provider(p.name)} for p in registry.patterns]
    if as_json:
        emit_json(entries)
        return
    rows = [(e["name"], e["family"], ",".join(e["targets"]), ",".join(e["devices"]), e["variants"], e["nodes"],
             e["description"]) for e in entries]
    console().print(table("Patterns", ("name", "family", "targets", "devices", "variants", "nodes", "description"),
                          rows))


@patterns.command("show")
@click.argument("name")
@json_option
def show_pattern(name: str, as_json: bool) -> None:
    """Print pattern NAME (or every pattern of family NAME): header, match template and replacement per target."""
    from gsrewrite.errors import UnknownPatternError, did_you_mean
    from gsrewrite.patterns import default_registry

    registry = default_registry()
    families = registry.families()
    patterns_by_name = {p.name: p for p in registry.patterns}
    if name in patterns_by_name:
        chosen = [patterns_by_name[name]]
    elif name in families:
        chosen = families[name]
    else:
        hint = did_you_mean(name, [*patterns_by_name, *families])
        raise UnknownPatternError(f"unknown pattern or family {name!r}{hint}; 'gsrewrite patterns list' shows them")
    if as_json:
        entries = [p.to_dict() | {"match": p.match_text, "replace": p.replace_texts} for p in chosen]
        emit_json(entries[0] if len(entries) == 1 and name not in families else entries)
        return
    for pattern in chosen:
        _show(pattern)


def _show(pattern: Any) -> None:
    from rich.markup import escape

    from gsrewrite.patterns.pattern import DEVICES

    out = console()
    out.print(f"[bold]{escape(printable(pattern.name))}[/bold] "
              + escape(printable(f"(family {pattern.family}) - {pattern.description}")))
    out.print(printable(f"source: {pattern.source}"), markup=False, highlight=False)
    details = {"constants": sorted(pattern.constants), "optional": sorted(pattern.optional),
               "checks": list(pattern.checks), "compute": pattern.compute,
               "devices": list(pattern.devices) if len(pattern.devices) < len(DEVICES) else []}
    for key, value in details.items():
        if value:
            out.print(printable(f"{key}: {value}"), markup=False, highlight=False)
    out.print("match:", markup=False)
    out.print(_lines(pattern.match_text), markup=False, highlight=False)
    for target, text in pattern.replace_texts.items():
        out.print(printable(f"replace ({target}):"), markup=False)
        out.print(_lines(text), markup=False, highlight=False)


def _lines(text: str) -> str:
    """A template's text: its lines kept, control characters in them escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


@patterns.command("check")
@click.argument("files", nargs=-1, required=True)
@json_option
def check_patterns(files: tuple[str, ...], as_json: bool) -> None:
    """Load each pattern FILE as gsrewrite would: TOML, templates, fragments, op lint (FILE:LINE for unknown
    ops or fragments called without alt.), and every named check and computation registered. Exit 2 if any
    file has a problem."""
    from gsrewrite.errors import GsrewriteError
    from gsrewrite.patterns import default_registry
    from gsrewrite.patterns.pattern import load_pattern

    registry = default_registry()
    results: dict[str, str] = {}
    for file in files:
        try:
            loaded = load_pattern(file)
            registry.verify(loaded)
            results[file] = f"ok ({len(loaded)} pattern{'s' if len(loaded) != 1 else ''})"
        except GsrewriteError as exc:
            results[file] = f"error: {str(exc).splitlines()[0]}"
    if as_json:
        emit_json({f: {"ok": r.startswith("ok"), "message": r} for f, r in results.items()})
    else:
        for file, result in results.items():
            click.echo(f"{file}: {result}")
    if any(not r.startswith("ok") for r in results.values()):
        raise SystemExit(2)
