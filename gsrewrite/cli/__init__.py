"""The ``gsrewrite`` command line: a click group whose subcommands are imported on first use."""

from __future__ import annotations

import os

# onnxruntime's telemetry writes $TMPDIR/.ses on import (1.32): a command leaves nothing behind that it did not
# write on purpose. Set before anything imports onnxruntime; a user's own setting wins.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from gsrewrite.cli._group import main

__all__ = ["main"]
