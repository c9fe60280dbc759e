"""What compare.py measures on every output model: ops, fusions, size, accuracy and onnxruntime latency.

``op_counts``/``fused_counts``/``output_size`` are plain reads done in the parent process. ``probe`` (one
session, one run, the max abs diff against the reference outputs) and ``latencies`` (several models,
measured in interleaved rounds so that a load change on the machine hits every tool alike) run in worker
subprocesses, because onnxruntime may abort on a malformed model.
"""

from __future__ import annotations

import collections
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

FUSED_OPS = {
    "attention": {"Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention"},
    "norm": {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
             "SkipSimplifiedLayerNormalization", "RMSNormalization", "EmbedLayerNormalization"},
    "gelu": {"Gelu", "FastGelu", "BiasGelu", "QuickGelu"},
    "bn_left": {"BatchNormalization"},
}
MODES = ("disabled", "enabled")
#: Sessions per output and mode in the latency measurement (see latencies).
SESSIONS_PER_OUTPUT = 3


def op_counts(path: Path) -> collections.Counter:
    """Nodes by op type, subgraphs (If/Loop/Scan bodies) included."""
    model = onnx.load(str(path), load_external_data=False)
    counts: collections.Counter = collections.Counter()

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            counts[node.op_type] += 1
            for attr in node.attribute:
                for sub in [attr.g, *attr.graphs]:
                    if sub.node:
                        walk(sub)

    walk(model.graph)
    return counts


def fused_counts(ops: collections.Counter) -> dict[str, int]:
    """Attention / norm / GELU fusions present and BatchNormalizations left (Conv+BN not folded)."""
    return {key: sum(ops[o] for o in names) for key, names in FUSED_OPS.items()}


def output_size(folder: Path) -> int:
    """Bytes of everything a tool wrote into its (otherwise empty) output folder: model + external data."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# --- onnxruntime (worker side) --------------------------------------------------------------------------
def _session(path: Path, mode: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if mode == "disabled"
                                        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _feeds(session: Any, inputs: Path) -> dict[str, np.ndarray]:
    with np.load(inputs) as data:
        available = {k: data[k] for k in data.files}
    missing = [i.name for i in session.get_inputs() if i.name not in available]
    if missing:
        raise ValueError(f"no sample data for input(s) {', '.join(missing)}")
    return {i.name: available[i.name] for i in session.get_inputs()}


def max_abs_diff(session: Any, outputs: list[np.ndarray], reference: Path) -> tuple[float, str]:
    """Largest |output - reference| over all outputs (by name, else by position), and a note."""
    with np.load(reference) as data:
        ref = {k: data[k] for k in data.files}
    names = [o.name for o in session.get_outputs()]
    note = ""
    if not all(n in ref for n in names):
        if len(names) != len(ref):
            return float("nan"), f"outputs {names} do not match the reference's {sorted(ref)}"
        ref, note = dict(zip(names, ref.values(), strict=True)), "outputs renamed; compared by position"
    worst = 0.0
    for name, value in zip(names, outputs, strict=True):
        if value.shape != ref[name].shape:
            return float("nan"), f"output {name!r} has shape {value.shape}, reference {ref[name].shape}"
        worst = max(worst, float(np.max(np.abs(value.astype(np.float64) - ref[name].astype(np.float64)),
                                        initial=0.0)))
    return worst, note


def probe(path: Path, inputs: Path, reference: Path | None) -> dict[str, Any]:
    """Load ``path`` (graph optimizations disabled), run it once, compare with the reference outputs."""
    session = _session(path, "disabled")
    outputs = session.run(None, _feeds(session, inputs))
    if reference is None:
        return {"max_diff": None, "note": "no reference outputs"}
    diff, note = max_abs_diff(session, outputs, reference)
    if np.isnan(diff):
        return {"max_diff": None, "error": note}
    return {"max_diff": diff, "note": note}


def latencies(paths: list[Path], inputs: Path, runs: int, warmup: int = 5,
              sessions: int = SESSIONS_PER_OUTPUT) -> dict[str, dict[str, float]]:
    """Median seconds per run of each model, graph optimizations disabled and enabled, 1 thread.

    Every model gets ``sessions`` sessions per mode, created in turns (all models once, then again): where a
    session's buffers land in memory moved its latency by a few percent for the whole run (two byte-identical
    BERT outputs measured 1.040 and 1.068 ms with one session each). Then ``ceil(runs / sessions)`` rounds each
    run every session once, in an order shuffled per round (seeded: a fixed order let the cache state a session
    inherits from its predecessor favour some columns). The result is the median of the sessions' medians.
    """
    keys = [(str(p), mode, k) for k in range(max(1, sessions)) for p in paths for mode in MODES]
    created = {key: _session(Path(key[0]), key[1]) for key in keys}
    feeds = {key: _feeds(s, inputs) for key, s in created.items()}
    for key, session in created.items():
        for _ in range(warmup):
            session.run(None, feeds[key])
    times: dict[tuple[str, str, int], list[float]] = {key: [] for key in created}
    order = list(created.items())
    shuffler = random.Random(0)
    for _ in range(-(-runs // max(1, sessions))):
        shuffler.shuffle(order)
        for key, session in order:
            start = time.perf_counter()
            session.run(None, feeds[key])
            times[key].append(time.perf_counter() - start)
    medians: dict[tuple[str, str], list[float]] = {}
    for (path, mode, _k), values in times.items():
        medians.setdefault((path, mode), []).append(statistics.median(values))
    result: dict[str, dict[str, float]] = {}
    for (path, mode), values in medians.items():
        result.setdefault(path, {})[mode] = statistics.median(values)
    return result
