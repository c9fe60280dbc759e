"""``optimize --tune``: keep the fastest of the fused model, the fused model without each fusion family that
matched, and the input itself, measured with onnxruntime on the chosen device's provider (CPU here), runs
interleaved. The kept candidate is validated against the input like any optimize output.

Why: a fusion that pays on one machine (or onnxruntime version, or thread count) can cost on another (the
packed-QKV Attention kernel is slower than MatMul + Softmax on some CPUs); measuring on the user's machine
settles it. The report lists every candidate's latency and why the kept one was kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.patterns import default_registry
from gsrewrite.pipelines.bench import bench, bench_inputs
from gsrewrite.pipelines.optimize import optimize_model
from gsrewrite.stages import stage

log = logging.getLogger(__name__)

#: a candidate must be this much faster than the full fusion to replace it (noise)
MARGIN = 0.02


@dataclass
class TuneResult:
    model: onnx.ModelProto
    kept: str
    timings: dict[str, float] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "reason": self.reason,
                "latency_ms": {k: round(v, 4) for k, v in self.timings.items()}}

    def report(self) -> str:
        lines = [f"tune: kept {self.kept} ({self.reason})"]
        for label, ms in self.timings.items():
            lines.append(f"  {label}: {ms:.3f} ms")
        return "\n".join(lines)


def tune(original: onnx.ModelProto, fused: onnx.ModelProto, counts: dict[str, int], settings: dict[str, Any],
         *, runs: int = 10, threads: int = 1) -> TuneResult:
    """Time the candidates (see the module docstring) and return the fastest; ``settings`` are optimize's."""
    registry = default_registry()
    family_of = {p.name: p.family for p in registry.select(["all"])}
    families = sorted({family_of.get(name, name) for name, n in counts.items() if n})
    candidates: list[tuple[str, onnx.ModelProto]] = [("all fusions", fused)]
    wanted = registry.select(settings.get("patterns") or ["all"])
    for family in families:
        names = [p.name for p in wanted if p.family != family]
        with stage(f"tuning: without {family}"):
            if names:
                variant = optimize_model(original, **{**settings, "validation": None, "patterns": names,
                                                      "explain": False}).model
            else:
                variant = original
        candidates.append((f"without {family}", variant))
    candidates.append(("the input (no fusion)", original))
    with stage("tuning: timing candidates"):
        timed = bench(candidates, runs=runs, threads=threads, inputs=bench_inputs(original))
    timings = {t.model: t.min_ms for t in timed.timings}
    best_label = min(timings, key=timings.__getitem__)
    full = timings["all fusions"]
    if best_label != "all fusions" and timings[best_label] > full * (1 - MARGIN):
        best_label = "all fusions"
        reason = f"no candidate was more than {MARGIN:.0%} faster"
    else:
        reason = "fastest" if best_label == "all fusions" else \
            f"{full / timings[best_label]:.3f}x faster than all fusions"
    model = dict(candidates)[best_label]
    return TuneResult(model, best_label, timings, reason)
