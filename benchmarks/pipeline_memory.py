"""Peak memory and wall time of gsrewrite's commands on one model, against its weight bytes (issue 27).

Each command runs as its own process (the installed ``gsrewrite`` script, or ``python -c`` for the floor:
``onnx.load`` + ``onnx.save`` with external data); its peak RSS comes from ``os.wait4``'s rusage. Runs are
interleaved round by round; the table quotes the minimum wall time, the median peak and the highest one.

    python benchmarks/pipeline_memory.py MODEL.onnx [--rounds 2] [--out results.md]

Large models are made by ``tests/fixtures/make_base_width.py --kv`` (not in git).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = ("import onnx, sys; m = onnx.load(sys.argv[1]); "
         "onnx.save(m, sys.argv[2], save_as_external_data=True, location='floor.onnx.data')")
#: what running the model at all costs: an onnxruntime session with its default options and one run on the
#: model's sample inputs (``<stem>.inputs.npz`` beside it, as make_base_width.py writes them)
RUN = ("import numpy as np, onnxruntime as ort, sys; "
       "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider']); "
       "s.run(None, dict(np.load(sys.argv[2])))")
#: a tolerance random weights meet (the strategy runs once, validated, benched, saved; no bisection)
MET = ["--min-cosine", "0.5", "--min-top1", "0", "--min-agreement", "0", "--allow-slower"]


def weight_bytes(path: Path) -> int:
    """Read without the weights: a child's peak RSS starts from this process's at fork, so this one stays small."""
    from gsrewrite.model_io.tensors import declared_nbytes
    from gsrewrite.model_io.weightless import load_weightless

    return sum(declared_nbytes(t) for t in load_weightless(path).graph.initializer)


def commands(model: Path, work: Path, compress: bool = False) -> dict[str, list[str]]:
    tool = [str(Path(sys.executable).with_name("gsrewrite"))]
    sample = model.with_name(model.name.removesuffix(".onnx") + ".inputs.npz")
    running = {"onnxruntime session + one run (default options)": [sys.executable, "-c", RUN, str(model),
                                                                   str(sample)]} if sample.is_file() else {}
    compressing = {f"gsrewrite compress -s {strategy} (tolerance met)": [
        *tool, "compress", str(model), str(work / f"{strategy}.onnx"), "-s", strategy, "--external-data", "--force",
        *MET] for strategy in ("int4", "dynamic-int8")} if compress else {}
    return {
        "onnx.load + onnx.save (floor)": [sys.executable, "-c", FLOOR, str(model), str(work / "floor.onnx")],
        **running,
        **compressing,
        "gsrewrite optimize --external-data": [*tool, "optimize", str(model), str(work / "opt.onnx"), "--external-data",
                                               "--force"],
        "gsrewrite simplify --external-data": [*tool, "simplify", str(model), str(work / "simp.onnx"),
                                               "--external-data", "--force"],
        "gsrewrite info": [*tool, "info", str(model)],
        "gsrewrite shapes": [*tool, "shapes", str(model)],
        "gsrewrite profile --no-sparsity": [*tool, "profile", str(model), "--no-sparsity"],
        "gsrewrite memory": [*tool, "memory", str(model)],
    }


def run(argv: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, exit code) of one process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if process.stderr is not None:
        error = process.stderr.read().decode(errors="replace").strip().splitlines()
        process.stderr.close()
        if os.waitstatus_to_exitcode(status) != 0:
            print(f"  failed: {' '.join(argv[:3])}: {error[-1] if error else ''}", file=sys.stderr)
    process.returncode = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_maxrss * 1024, process.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="append the markdown table to this file")
    parser.add_argument("--compress", action="store_true", help="also compress -s int4 / dynamic-int8")
    args = parser.parse_args()
    weights = weight_bytes(args.model)
    work = Path(tempfile.mkdtemp(prefix="gsrewrite-memory-", dir=args.model.parent))
    try:
        cmds = commands(args.model, work, args.compress)
        walls: dict[str, list[float]] = {name: [] for name in cmds}
        peaks: dict[str, list[int]] = {name: [] for name in cmds}
        codes: dict[str, set[int]] = {name: set() for name in cmds}
        for round_ in range(args.rounds):
            for name, argv in cmds.items():
                seconds, peak, code = run(argv)
                walls[name].append(seconds)
                peaks[name].append(peak)
                codes[name].add(code)
                print(f"round {round_ + 1} {name}: {seconds:.1f} s, {peak / 1e9:.2f} GB", file=sys.stderr)
                for leftover in work.iterdir():
                    leftover.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor = min(walls["onnx.load + onnx.save (floor)"])
    lines = [f"### {args.model.name}: weights {weights / 1e9:.2f} GB, {args.rounds} interleaved rounds",
             "", "| command | peak RSS (median) | x weights | highest peak | wall (min) | x floor wall | exit |",
             "|---|---|---|---|---|---|---|"]
    for name in cmds:
        peak, top = statistics.median(peaks[name]), max(peaks[name])
        wall = min(walls[name])
        lines.append(f"| {name} | {peak / 1e9:.2f} GB | {peak / weights:.2f}x | "
                     f"{top / 1e9:.2f} GB ({top / weights:.2f}x) | {wall:.1f} s | {wall / floor:.2f}x | "
                     f"{','.join(map(str, sorted(codes[name])))} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out is not None:
        with open(args.out, "a") as f:
            f.write("\n" + table)


if __name__ == "__main__":
    main()
