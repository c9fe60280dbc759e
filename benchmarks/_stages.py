"""Where ``apply``'s time goes: the same steps as ``gsrewrite.pipelines.apply``, timed one by one.

This mirrors the engine's private sequence (load, pattern registry, to_graph, canonicalize, the rewrite
pass, legalize + cleanup + export, validation, save). If the engine's internals move, ``stage_times``
returns an empty dict and the report shows no breakdown rather than wrong numbers.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

STAGES = ["load", "patterns", "to_graph", "canonicalize", "pass", "export", "validate", "save"]


def stage_times(path: Path, target: str, repeat: int = 3) -> dict[str, float]:
    """Median seconds per stage of ``repeat`` load -> apply(all) -> validate -> save runs (empty if unavailable)."""
    try:
        runs = [_stages(path, target) for _ in range(max(1, repeat))]
    except (ImportError, AttributeError, TypeError) as exc:
        log.warning("no stage breakdown: the engine's internals changed (%s)", exc)
        return {}
    return {stage: statistics.median(run[stage] for run in runs) for stage in runs[0]}


def _stages(path: Path, target: str) -> dict[str, float]:
    from gsrewrite.engine.canonicalize import canonicalize
    from gsrewrite.engine.legalize import legalize
    from gsrewrite.engine.rewrite import RewritePass
    from gsrewrite.graph.conversion import to_graph
    from gsrewrite.graph.core import to_model
    from gsrewrite.model_io import load_model, save_model
    from gsrewrite.patterns import default_registry
    from gsrewrite.validation import validate

    times: dict[str, float] = {}
    clock = _Clock(times)
    model = clock("load", lambda: load_model(path))
    registry = clock("patterns", default_registry)
    selected = registry.select(["all"])
    graph = clock("to_graph", lambda: to_graph(model))
    clock("canonicalize", lambda: canonicalize(graph))
    rewrite = RewritePass(selected, registry.checks, registry.computes, target)
    run = clock("pass", lambda: rewrite.run(graph))

    def export():  # type: ignore[no-untyped-def]
        legalize(graph)
        graph.cleanup(remove_unused_graph_inputs=False).toposort()
        return to_model(graph, model)

    out = clock("export", export) if run.modified else model
    clock("validate", lambda: validate(model, out) if run.modified else None)
    with tempfile.TemporaryDirectory() as tmp:
        clock("save", lambda: save_model(out, Path(tmp) / "out.onnx", input_path=path))
    return times


class _Clock:
    def __init__(self, times: dict[str, float]) -> None:
        self.times = times

    def __call__(self, name: str, fn):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        result = fn()
        self.times[name] = time.perf_counter() - start
        return result
