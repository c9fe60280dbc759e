"""The built-in commands, a plugin like any other: ``gsrewrite_cli_commands`` gives them to the CLI.

The group registers this module as the built-in plugin ``builtin:cli`` (:func:`gsrewrite.plugin_manager.
register_builtin`) before it asks the hook for commands; a third-party plugin's commands come through the same
hook, after these (a plugin reusing one of these names is the one left out).
"""

from __future__ import annotations

import click

from gsrewrite.cli.apply_cmd import apply, explain
from gsrewrite.cli.bench_cmd import bench
from gsrewrite.cli.compress_cmd import compress
from gsrewrite.cli.compute_graph_cmd import compute_graph
from gsrewrite.cli.extract_cmd import extract
from gsrewrite.cli.info_cmd import info
from gsrewrite.cli.memory_cmd import memory
from gsrewrite.cli.optimize_cmd import optimize
from gsrewrite.cli.passes_cmd import passes
from gsrewrite.cli.patterns_cmd import patterns
from gsrewrite.cli.plugins_cmd import plugins
from gsrewrite.cli.profile_cmd import profile
from gsrewrite.cli.shapes_cmd import shapes
from gsrewrite.cli.simplify_cmd import simplify
from gsrewrite.cli.validate_cmd import validate
from gsrewrite.hookspecs import hookimpl

COMMANDS: list[click.Command] = [
    optimize, apply, explain, simplify, compress, bench, profile, shapes, memory, compute_graph, extract,
    passes, patterns, validate, info, plugins,
]


@hookimpl
def gsrewrite_cli_commands() -> list[click.Command]:
    return list(COMMANDS)
