"""``gsrewrite plugins``: the plugins gsrewrite found, their versions, hooks, commands and status."""

from __future__ import annotations

from typing import Any

import click

from gsrewrite.cli._options import json_option
from gsrewrite.cli._output import console, emit_json, table
from gsrewrite.errors import PluginError
from gsrewrite.plugin_hooks import plugin_cli_commands
from gsrewrite.plugin_manager import PluginRecord, autoload_disabled, plugin_records


def _describe(record: PluginRecord) -> dict[str, Any]:
    """The record as a dict, plus the commands the plugin adds (a failing command hook marks it failed)."""
    data = record.to_dict() | {"commands": []}
    if record.status == "ok" and "gsrewrite_cli_commands" in record.hooks:
        try:
            data["commands"] = sorted(c.name or "" for c in plugin_cli_commands(record.name))
        except PluginError as exc:
            data["status"], data["error"] = "failed", str(exc)
    return data


@click.command("plugins")
@json_option
def plugins(as_json: bool) -> None:
    """List plugins (built-in and installed): version, hooks, commands and status.

    A plugin that failed to load is listed as failed with the reason; the exit code stays 0.
    """
    rows = [_describe(record) for record in plugin_records()]
    if as_json:
        emit_json({"autoload": not autoload_disabled(), "plugins": rows})
        return
    columns = ["plugin", "distribution", "version", "hooks", "commands", "status"]
    cells = [
        [
            r["name"],
            r["distribution"],
            r["version"],
            "\n".join(r["hooks"]),
            ", ".join(r["commands"]),
            r["status"],
        ]
        for r in rows
    ]
    console().print(table("gsrewrite plugins", columns, cells))
    for r in rows:
        if r["error"]:
            click.echo(f"{r['name']}: {r['status']}: {r['error']}")
