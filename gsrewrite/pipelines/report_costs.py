"""What a result bought, for the report: nodes, parameters and file size (:class:`ModelStats`), MACs and the planned
activation memory (:mod:`gsrewrite.profiling`) of the model before and after, and the op types whose counts
changed.

MACs and memory are counted at validation's sample sizes of the input (``batch=2, sequence=16`` unless the model
says otherwise), no weight read (``sparsity=False``). A model the profiler cannot count is reported as not
measured, with the reason, never as an error: the model was written already.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.report.record import Metric
from gsrewrite.simplifier.result import ModelStats

log = logging.getLogger(__name__)


@dataclass
class Costs:
    """The metrics rows, the op rows, the sizes MACs and memory were counted at, and what was not measured."""

    metrics: list[Metric] = field(default_factory=list)
    ops: list[Metric] = field(default_factory=list)
    sizes: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Counted:
    macs: int | None
    memory: int | None
    complete: bool
    bindings: dict[str, int]


def costs(before: onnx.ModelProto, after: onnx.ModelProto, size_before: int | None = None,
          size_after: int | None = None) -> Costs:
    """Before/after rows for ``before`` and ``after`` (sizes in bytes when known: the files read and written)."""
    first, second = ModelStats.of(before, size_before), ModelStats.of(after, size_after)
    out = Costs()
    out.metrics = [Metric("nodes", first.nodes_total, second.nodes_total),
                   Metric("parameters", first.parameters, second.parameters),
                   Metric("file size", first.size, second.size, "bytes")]
    out.ops = [Metric(op, first.ops.get(op, 0), second.ops.get(op, 0))
               for op in sorted(set(first.ops) | set(second.ops)) if first.ops.get(op, 0) != second.ops.get(op, 0)]
    counted = [_counted(model, label, out.notes) for model, label in ((before, "before"), (after, "after"))]
    out.metrics.append(Metric("MACs", counted[0].macs if counted[0] else None,
                              counted[1].macs if counted[1] else None, "macs"))
    partial = any(c is not None and not c.complete for c in counted)
    out.metrics.append(Metric("activation memory (planned arena)", counted[0].memory if counted[0] else None,
                              counted[1].memory if counted[1] else None, "bytes",
                              "at least: some tensor sizes unknown" if partial else ""))
    bindings = next((c.bindings for c in counted if c is not None and c.bindings), {})
    out.sizes = ", ".join(f"{k}={v}" for k, v in sorted(bindings.items()))
    return out


def _counted(model: onnx.ModelProto, label: str, notes: list[str]) -> _Counted | None:
    """MACs and the activation arena of ``model`` at validation's sample sizes; None (and a note) when they
    cannot be counted."""
    from gsrewrite.profiling.analysis import default_bindings
    from gsrewrite.profiling.costs import profile_model
    from gsrewrite.profiling.memory import plan_memory
    from gsrewrite.profiling.subgraphs import inline_functions
    from gsrewrite.shapes.walk import infer_symbolic
    from gsrewrite.stages import stage

    try:
        with stage(f"report: counting the model {label}"):
            proto = inline_functions(model)
            shapes = infer_symbolic(proto)
            bindings = default_bindings(proto, shapes)
            macs = profile_model(proto, shapes=shapes, sparsity=False).bind(bindings).macs
            plan = plan_memory(proto, shapes, bindings)
    except Exception as exc:  # the profiler's limits are not the command's failure: the report says so
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.warning("report: MACs and memory of the model %s not counted: %s", label, reason)
        notes.append(f"MACs and activation memory of the model {label} not counted: {reason}")
        return None
    if not isinstance(macs, int):
        notes.append(f"MACs of the model {label} depend on sizes only the data decides ({_text(macs)}): not shown")
    return _Counted(macs if isinstance(macs, int) else None, plan.arena_bytes, plan.complete, dict(bindings))


def _text(value: Any) -> str:
    from gsrewrite.shapes import symdim

    return symdim.text(value)
