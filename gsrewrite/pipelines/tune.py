"""``optimize --tune``: keep the fastest of the fused model, the fused model without each fusion family that
matched, and the input itself, measured with onnxruntime on the chosen device's provider (CPU here), runs
interleaved. The kept candidate is validated against the input like any optimize output.

Why: a fusion that pays on one machine (or onnxruntime version, or thread count) can cost on another (the
packed-QKV Attention kernel is slower than MatMul + Softmax on some CPUs); measuring on the user's machine
settles it. The report lists every candidate's latency and why the kept one was kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.patterns import default_registry
from gsrewrite.pipelines.bench import bench, bench_inputs
from gsrewrite.reporting import Report, Table
from gsrewrite.stages import stage

log = logging.getLogger(__name__)

#: a candidate must be this much faster than the full fusion to replace it (noise)
MARGIN = 0.02
FULL = "all fusions"
INPUT = "the input (no fusion)"


@dataclass
class TuneResult:
    """The candidate kept (its model and label), every candidate's latency (ms, min of interleaved runs) and why."""

    model: onnx.ModelProto
    kept: str
    timings: dict[str, float] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "reason": self.reason,
                "latency_ms": {k: round(v, 4) for k, v in self.timings.items()}}

    def report_blocks(self) -> Report:
        """The candidates' latencies (ratio to all fusions) and the one kept, as report blocks."""
        full = self.timings.get(FULL)
        rows = [(label, f"{ms:.3f}", f"{ms / full:.3f}x" if full else "", "kept" if label == self.kept else "")
                for label, ms in self.timings.items()]
        return Report([Table("Tune: onnxruntime latency per candidate (min of interleaved runs)",
                             ("candidate", "ms", "vs all fusions", ""), rows),
                       f"Tune: kept {self.kept} ({self.reason})"])

    def report(self) -> str:
        return self.report_blocks().text()


def tune(original: onnx.ModelProto, fused: onnx.ModelProto, counts: dict[str, int], patterns: Sequence[str],
         without: Callable[[list[str]], onnx.ModelProto], *, runs: int = 10, threads: int = 1) -> TuneResult:
    """Time the candidates (see the module docstring) and return the fastest. ``patterns``: the names the fusion
    selected (``all``, families, patterns); ``without(names)``: the model fused with just the patterns ``names``."""
    registry = default_registry()
    family_of = {p.name: p.family for p in registry.select(["all"])}
    families = sorted({family_of.get(name, name) for name, n in counts.items() if n})
    candidates: list[tuple[str, onnx.ModelProto]] = [(FULL, fused)]
    wanted = registry.select(list(patterns) or ["all"])
    for family in families:
        names = [p.name for p in wanted if p.family != family]
        with stage(f"tuning: without {family}"):
            candidates.append((f"without {family}", without(names) if names else original))
    candidates.append((INPUT, original))
    with stage("tuning: timing candidates"):
        timed = bench(candidates, runs=runs, threads=threads, inputs=bench_inputs(original))
    timings = {t.model: t.min_ms for t in timed.timings}
    best_label = min(timings, key=timings.__getitem__)
    full = timings[FULL]
    if best_label != FULL and timings[best_label] > full * (1 - MARGIN):
        best_label = FULL
        reason = f"no candidate was more than {MARGIN:.0%} faster"
    else:
        reason = "fastest" if best_label == FULL else f"{full / timings[best_label]:.3f}x faster than all fusions"
    return TuneResult(dict(candidates)[best_label], best_label, timings, reason)
