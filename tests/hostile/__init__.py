"""A hostile-model corpus: tiny ONNX models (and non-models) that are bombs because of what they declare.

``build_hostile_corpus(folder)`` writes every case into its own subfolder of ``folder`` (plus ``_outside/``
for files that external data must not reach) and returns :class:`HostileCase` records: name, one-line
description, model path, the CLI exit code expected (``None``: 0, 1 and 2 are all acceptable) and tags
(``"bomb"``: a memory or time bomb). ``tests/test_hostile_corpus.py`` runs them through every CLI command.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import bombs, data_files, files, graphs, tensors  # noqa: F401 - importing registers the cases
from ._base import DATA_COMMANDS, MODEL_FILE, OUTSIDE, READ_ONLY_COMMANDS, REGISTRY, HostileCase

__all__ = ["CASE_NAMES", "DATA_COMMANDS", "MODEL_FILE", "OUTSIDE", "READ_ONLY_COMMANDS", "HostileCase",
           "build_hostile_corpus", "case_exits", "case_tags"]

#: Every case name, in corpus order (usable at collection time for parametrization).
CASE_NAMES: list[str] = [entry.name for entry in REGISTRY]


def case_tags(name: str) -> frozenset[str]:
    """The tags of case ``name`` (known at collection time, before anything is built)."""
    return next(entry.tags for entry in REGISTRY if entry.name == name)


def case_exits(name: str) -> dict[str, int | None]:
    """The per-command exit codes of case ``name`` (known at collection time)."""
    return dict(next(entry.exits for entry in REGISTRY if entry.name == name))


def build_hostile_corpus(folder: str | os.PathLike[str]) -> list[HostileCase]:
    """Write every hostile case under ``folder`` (one subfolder each) and describe them."""
    root = Path(folder)
    (root / OUTSIDE).mkdir(parents=True, exist_ok=True)
    cases = []
    for entry in REGISTRY:
        case_dir = root / entry.name
        case_dir.mkdir()
        entry.builder(case_dir)
        cases.append(HostileCase(entry.name, entry.description, case_dir, case_dir / MODEL_FILE,
                                 entry.expected_exit, entry.read_exit, entry.tags, entry.exits))
    return cases
