"""What ``simplify`` reports: the model, changes per pass, before/after statistics, the validation verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.info import op_histogram
from gsrewrite.model_io import serialized_size
from gsrewrite.model_io.graph_walk import iter_graphs
from gsrewrite.reporting import Report, rewrite_report


@dataclass(frozen=True)
class ModelStats:
    """Size of a model: nodes (main graph, and all graphs), ops by type, bytes, parameters."""

    nodes: int
    nodes_total: int
    ops: dict[str, int]
    size: int
    parameters: int

    @classmethod
    def of(cls, model: onnx.ModelProto, size: int | None = None) -> ModelStats:
        """The statistics of ``model`` (parameters: elements of initializers and Constant-node tensors);
        ``size`` when the caller already knows the bytes (a file just read or written)."""
        ops = op_histogram(model)
        parameters = 0
        for graph, _ in iter_graphs(model):
            parameters += sum(math.prod(t.dims) for t in graph.initializer)
            parameters += sum(math.prod(a.t.dims) for n in graph.node if n.op_type == "Constant"
                              for a in n.attribute if a.name == "value")
        size = serialized_size(model) if size is None else size
        return cls(len(model.graph.node), sum(ops.values()), ops, size, parameters)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "nodes_total": self.nodes_total, "ops": dict(self.ops), "size": self.size,
                "parameters": self.parameters}


@dataclass
class SimplifyResult:
    """The outcome of :func:`gsrewrite.simplify`. ``model`` is always safe to use: validated, unchanged,
    or produced with validation turned off by the caller. ``before``/``after`` are computed on first use."""

    model: onnx.ModelProto
    changed: bool
    counts: dict[str, int]
    passes: list[str]
    original: onnx.ModelProto = field(repr=False)
    rounds: int = 0
    validation: Any = None
    dropped: dict[str, str] = field(default_factory=dict)
    #: nodes constant folding left alone because of the size or work limits: node name -> reason
    skipped_folds: dict[str, str] = field(default_factory=dict)
    #: the rewrites of the pattern passes (``fuse-conv-bn``, ...): match records with their regions (the report's)
    records: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    #: ``model`` serialized, when validation serialized it (``save_model(..., serialized=)`` writes these bytes)
    serialized: bytes | None = field(default=None, repr=False)
    #: the folder ``model``'s weight references are relative to (a model read weightless: Source.mapped), if any
    weights_dir: str | None = None
    #: the simplified graph itself (onnx-graphsurgeon, its tensors typed), for a next stage to take over without
    #: importing ``model`` again (optimize's fusion pass); None when ``model`` is the original
    graph: Any = field(default=None, repr=False, compare=False)
    _stats: dict[int, ModelStats] = field(default_factory=dict, repr=False)
    _sizes: dict[int, int] = field(default_factory=dict, repr=False)

    @property
    def before(self) -> ModelStats:
        """Statistics of the original model."""
        return self._of(self.original)

    @property
    def after(self) -> ModelStats:
        """Statistics of the simplified model."""
        return self._of(self.model)

    def _of(self, model: onnx.ModelProto) -> ModelStats:
        cached = self._stats.get(id(model))
        if cached is None:
            cached = self._stats[id(model)] = ModelStats.of(model, self._sizes.get(id(model)))
        return cached

    def note_size(self, model: onnx.ModelProto, size: int) -> None:
        """Record a size already known (bytes of a file just read or written): no re-serialization to count it."""
        self._sizes[id(model)] = size

    def report(self, verbose: bool = False) -> str:
        """A readable report: changed ops, nodes, parameters and size before/after, changes per pass, what was
        dropped or not folded, the validation verdict."""
        return self.report_blocks(verbose=verbose).text()

    def report_blocks(self, *, verbose: bool = False) -> Report:
        """:meth:`report` as blocks (the CLI renders them); sizes from :meth:`note_size` when known."""
        report = rewrite_report(self.before, self.after, {f"Changes per pass ({self.rounds} rounds)": self.counts},
                                dropped=self.dropped, verbose=verbose,
                                verdict=self.validation.summary() if self.validation is not None else None)
        if self.skipped_folds:
            first, why = next(iter(self.skipped_folds.items()))
            others = len(self.skipped_folds) - 1
            more = f" (and {others} more; --json lists them)" if others else ""
            report.blocks.append(f"Not folded: {first}: {why}{more}")
        return report

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (the model itself is left out)."""
        return {
            "changed": self.changed,
            "passes": list(self.passes),
            "counts": dict(self.counts),
            "rounds": self.rounds,
            "dropped": dict(self.dropped),
            "skipped_folds": dict(self.skipped_folds),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "validation": self.validation.to_dict() if self.validation is not None else None,
            "seconds": round(self.seconds, 4),
        }
