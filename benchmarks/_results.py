"""compare.py's results: one Cell per (model, tool) output, grouped per model; saved as JSON next to the report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ORIGINAL = "original"


@dataclass
class Cell:
    """One output model (or the original) and everything measured on it; None = not measured."""

    seconds: float | None = None
    note: str = ""
    error: str = ""
    unavailable: str = ""
    ops: dict[str, int] = field(default_factory=dict)
    fused: dict[str, int] = field(default_factory=dict)
    size: int | None = None
    max_diff: float | None = None
    latency: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """The tool wrote a model (errors while measuring it are recorded in ``error``)."""
        return bool(self.ops) and not self.unavailable

    @property
    def nodes(self) -> int | None:
        return sum(self.ops.values()) if self.ops else None


@dataclass
class ModelResult:
    """One model: the onnx.load + onnx.save baseline, the hints given to peers, and a Cell per tool."""

    name: str
    family: str
    is_transformer: bool
    baseline: float
    hints: dict[str, Any]
    expected: dict[str, int]
    cells: dict[str, Cell] = field(default_factory=dict)

    def cell(self, tool: str) -> Cell:
        return self.cells.get(tool) or Cell(unavailable="not run")


def save(results: list[ModelResult], meta: dict[str, Any], path: Path) -> None:
    """Raw numbers as JSON (``meta``: tools, runs, folder, versions), for later analysis or re-rendering."""
    data = {**meta, "models": [asdict(r) for r in results]}
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def load(path: Path) -> tuple[list[ModelResult], dict[str, Any]]:
    """Read what ``save`` wrote: the results and the meta data."""
    data = json.loads(path.read_text())
    results = []
    for item in data.pop("models"):
        cells = {k: Cell(**v) for k, v in item.pop("cells").items()}
        results.append(ModelResult(**item, cells=cells))
    return results, data
