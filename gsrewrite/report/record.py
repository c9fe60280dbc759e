"""The report as data: what changed (regions), why not (misses), what it bought (metrics, validation, compression,
latency). Plain dataclasses of strings and numbers: serializable (:meth:`ReportRecord.to_dict`), no model object,
no weight (a constant is named with its shape and type only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

#: tensor kinds of a drawn subgraph
INPUT, OUTPUT, INTERNAL, WEIGHT = "input", "output", "internal", "weight"


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of a region: its name, shape text (``batch x 128 x 768``; ``?`` unknown), dtype, kind (``input``:
    from outside the region, ``output``: read outside it, ``internal``, ``weight``: a constant) and, for a constant
    of at most a few elements, its value as text."""

    name: str
    shape: str
    dtype: str
    kind: str
    value: str | None = None


@dataclass(frozen=True)
class NodeInfo:
    """A node of a region: op type, domain, name, attributes as text, and its tensors (indices into the
    subgraph's ``tensors``; -1: an optional input left out)."""

    op: str
    domain: str
    name: str
    attrs: tuple[tuple[str, str], ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class Subgraph:
    """Nodes and the tensors they touch."""

    nodes: tuple[NodeInfo, ...]
    tensors: tuple[TensorInfo, ...]

    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]


@dataclass(frozen=True)
class Region:
    """One rewrite: the matched subgraph (``before``) and its replacement (``after``), as first seen; ``signature``
    identifies the structure (ops, wiring, attributes, boundary shapes and types; not names): equal signatures
    are drawn once."""

    pattern: str
    variant: str
    signature: str
    before: Subgraph
    after: Subgraph


@dataclass
class RegionGroup:
    """Identical regions: the drawing of the first, how many there are, and the names behind them (at most
    ``MAX_NAMES`` node names; ``more`` counts the instances not listed). ``stage``: ``cleanup`` (a simplify
    pattern pass) or ``fusion``."""

    region: Region
    count: int = 0
    instances: list[str] = field(default_factory=list)
    more: int = 0
    stage: str = "fusion"


@dataclass(frozen=True)
class Miss:
    """A pattern or pass that did not fire, or whose rewrites were taken back: ``kind`` is ``dropped`` (validation
    failed: ``reason`` holds the numbers), ``skipped`` (target, opset or device policy), ``near miss`` (the
    deepest partial match and where it stopped), ``no candidate`` (no node of the anchor's type) or ``not
    folded`` / ``left uncompressed``."""

    name: str
    kind: str
    reason: str
    depth: int | None = None
    size: int | None = None


@dataclass(frozen=True)
class Metric:
    """A number before and after (``None``: not measured); ``unit``: ``count``, ``bytes`` or ``macs``."""

    label: str
    before: float | None
    after: float | None
    unit: str = "count"
    note: str = ""


@dataclass(frozen=True)
class OutputRow:
    """One output's comparison: ``text`` (the metrics as the CLI prints them), pass/fail, the failing metrics."""

    name: str
    text: str
    ok: bool
    max_abs: float | None = None
    cosine: float | None = None
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class SizeSet:
    """Validation at one input size set: its name (``sample``, ``small``, ``long``), the input shapes, the worst
    output (largest max abs error among float outputs) and whether every output agreed there."""

    name: str
    shapes: str
    ok: bool
    worst_output: str | None
    max_abs: float | None
    cosine: float | None
    failed: tuple[str, ...] = ()


@dataclass
class Validation:
    """The verdict, the rule (``atol=0.0001, rtol=0.001``) and where it came from, the runs per size, the rows per
    size set and per output."""

    verdict: str
    ok: bool
    rule: str
    source: str
    runs: int = 1
    atol: float | None = None
    size_sets: list[SizeSet] = field(default_factory=list)
    outputs: list[OutputRow] = field(default_factory=list)


@dataclass
class Compression:
    """A compression strategy's result: its tolerance and where it came from, each output against it, what it
    left uncompressed, the notes."""

    strategy: str
    rule: str
    source: str
    ok: bool
    outputs: list[OutputRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    graph: str = ""


@dataclass(frozen=True)
class Latency:
    """One measured latency (onnxruntime, milliseconds)."""

    label: str
    ms: float
    note: str = ""


@dataclass
class ReportRecord:
    """Everything the HTML report shows (:func:`gsrewrite.report.html.render`)."""

    command: str
    model: str
    output: str | None = None
    version: str = ""
    summary: list[str] = field(default_factory=list)
    groups: list[RegionGroup] = field(default_factory=list)
    misses: list[Miss] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    ops: list[Metric] = field(default_factory=list)
    validation: Validation | None = None
    compression: Compression | None = None
    latency: list[Latency] = field(default_factory=list)
    #: what the counts and byte figures were measured at (``batch=2, sequence=16``)
    sizes: str = ""
    #: what could not be measured, and why
    notes: list[str] = field(default_factory=list)
    #: the narrower input contracts the result was rewritten under (:mod:`gsrewrite.contracts`): name, what it
    #: no longer accepts
    contracts: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
