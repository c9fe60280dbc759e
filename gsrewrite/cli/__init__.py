"""The ``gsrewrite`` command line: a click group whose subcommands are imported on first use."""

from __future__ import annotations

from gsrewrite.cli._group import main

__all__ = ["main"]
