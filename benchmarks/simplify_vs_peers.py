"""``gsrewrite simplify`` against onnxsim, onnxslim, onnxoptimizer and scs4onnx, model by model.

Usage::

    .venv/bin/python benchmarks/simplify_vs_peers.py [MODEL.onnx | FOLDER ...] [--repeat 3] [--json]

(default folder: ``../shared/models``; the peers come with ``pip install -e '.[bench]'``). For every model:
main-graph node count after each tool, file size after gsrewrite and after scs4onnx's shrink mode (the
size-focused peer), wall time of gsrewrite and onnxsim (best of ``--repeat`` calls on the loaded model;
gsrewrite's own onnxruntime validation is timed separately), and whether gsrewrite's result agrees with
the original in onnxruntime (on the ``X.inputs.npz`` next to the model when there is one). A tool that
fails shows ``error``; a scs4onnx result onnxruntime cannot load is marked (and not compared). The last
column checks the targets: nodes <= every peer, size <= scs4onnx and <= the input, time <= onnxsim,
validation OK.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

DEFAULT_FOLDER = Path(__file__).resolve().parents[2] / "shared" / "models"


def run_onnxsim(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxsim

    return onnxsim.simplify(model)[0]


def run_onnxslim(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxslim

    return onnxslim.slim(model)


def run_onnxoptimizer(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxoptimizer

    return onnxoptimizer.optimize(model, onnxoptimizer.get_fuse_and_elimination_passes())


def run_scs4onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    from scs4onnx import shrinking

    return shrinking(onnx_graph=model, mode="shrink", non_verbose=True)[0]


def run_gsrewrite(model: onnx.ModelProto) -> onnx.ModelProto:
    import gsrewrite

    return gsrewrite.simplify(model, validate=False).model


PEERS: dict[str, Callable[[onnx.ModelProto], onnx.ModelProto]] = {
    "onnxsim": run_onnxsim,
    "onnxslim": run_onnxslim,
    "onnxoptimizer": run_onnxoptimizer,
    "scs4onnx": run_scs4onnx,
}


def timed(tools: dict[str, Callable[[onnx.ModelProto], onnx.ModelProto]], model: onnx.ModelProto,
          repeat: int) -> dict[str, tuple[onnx.ModelProto, float] | None]:
    """Each tool's result and best wall time on a copy of ``model`` (None when it fails). The tools take
    turns, ``repeat`` times, so that a busy machine slows them alike."""
    results: dict[str, tuple[onnx.ModelProto, float] | None] = {}
    for _ in range(repeat):
        for name, fn in tools.items():
            if name in results and results[name] is None:
                continue
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            start = time.perf_counter()
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    out = fn(copy)
            except Exception:
                results[name] = None
                continue
            elapsed = time.perf_counter() - start
            best = results.get(name)
            results[name] = (out, elapsed if best is None else min(best[1], elapsed))
    return results


def loads(model: onnx.ModelProto) -> bool:
    """True when onnxruntime accepts the model (scs4onnx's downcast, for one, can make it invalid)."""
    import onnxruntime as ort

    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


def measure(path: Path, repeat: int) -> dict[str, Any]:
    import gsrewrite

    model = onnx.load(str(path))
    row: dict[str, Any] = {"model": path.name, "input_nodes": len(model.graph.node), "input_size": model.ByteSize()}
    for name, outcome in timed({"gsrewrite": run_gsrewrite, **PEERS}, model, repeat).items():
        row[name] = None if outcome is None else {"nodes": len(outcome[0].graph.node), "size": outcome[0].ByteSize(),
                                                  "seconds": round(outcome[1], 4), "loads": loads(outcome[0])}
    result = gsrewrite.simplify(model)  # validated (and bisected, should a pass break the model)
    start = time.perf_counter()
    report = gsrewrite.validate(model, result.model) if result.changed else None
    row["validation_seconds"] = round(time.perf_counter() - start, 4)
    row["valid"] = report is None or report.ok
    inputs = path.with_name(path.name.removesuffix(".onnx") + ".inputs.npz")
    if inputs.exists() and result.changed:
        row["valid"] = row["valid"] and gsrewrite.validate(model, result.model, inputs=str(inputs)).ok
    row["dropped"] = sorted(result.dropped)
    row["targets"] = targets(row)
    return row


def targets(row: dict[str, Any]) -> list[str]:
    """The targets this row misses (empty when all are met)."""
    ours = row["gsrewrite"]
    if ours is None:
        return ["gsrewrite failed"]
    missed = []
    peer_nodes = [row[p]["nodes"] for p in ("onnxsim", "onnxslim", "onnxoptimizer") if row.get(p)]
    if peer_nodes and ours["nodes"] > min(peer_nodes):
        missed.append("nodes")
    scs = row.get("scs4onnx")
    if (scs and scs["loads"] and ours["size"] > scs["size"]) or ours["size"] > row["input_size"]:
        missed.append("size")
    if row.get("onnxsim") and ours["seconds"] > row["onnxsim"]["seconds"]:
        missed.append("time")
    if not row["valid"] or row["dropped"]:
        missed.append("validation")
    return missed


def markdown(rows: list[dict[str, Any]]) -> str:
    def cell(row: dict[str, Any], tool: str, key: str) -> str:
        value = (row.get(tool) or {}).get(key)
        return "error" if value is None else (f"{value:.3f}" if isinstance(value, float) else f"{value:,}")

    lines = ["| model | input nodes | gsrewrite | onnxsim | onnxslim | onnxoptimizer | input size | gsrewrite size "
             "| scs4onnx size | gsrewrite s | onnxsim s | validation s | valid | missed |",
             "|---|" + "---|" * 13]
    for row in rows:
        lines.append(" | ".join([
            f"| {row['model']}", str(row["input_nodes"]), cell(row, "gsrewrite", "nodes"),
            cell(row, "onnxsim", "nodes"),
            cell(row, "onnxslim", "nodes"), cell(row, "onnxoptimizer", "nodes"), f"{row['input_size']:,}",
            cell(row, "gsrewrite", "size"), scs_size(row), cell(row, "gsrewrite", "seconds"),
            cell(row, "onnxsim", "seconds"), f"{row['validation_seconds']:.3f}", "yes" if row["valid"] else "NO",
            ", ".join(row["targets"]) or "-",
        ]) + " |")
    return "\n".join(lines)


def scs_size(row: dict[str, Any]) -> str:
    scs = row.get("scs4onnx")
    if scs is None:
        return "error"
    return f"{scs['size']:,}" + ("" if scs["loads"] else " (onnxruntime rejects it)")


def model_paths(args: list[str]) -> list[Path]:
    paths: list[Path] = []
    for arg in args or [str(DEFAULT_FOLDER)]:
        p = Path(arg)
        paths.extend(sorted(p.glob("*.onnx")) if p.is_dir() else [p])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model files or folders (default: ../shared/models)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per tool (best is kept)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    args = parser.parse_args(argv)
    os.environ.setdefault("ORT_LOGGING_LEVEL", "3")
    rows = []
    for path in model_paths(args.models):
        rows.append(measure(path, args.repeat))
        print(f"measured {path.name}", file=sys.stderr)
    print(json.dumps(rows, indent=2) if args.json else markdown(rows))
    return 0 if not any(row["targets"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
