"""Wall time of one gsrewrite command at two commits, interleaved, on the base-width exports.

Each commit's package is a snapshot (``git archive COMMIT gsrewrite plugins patterns``) put first on the path,
so other edits of the work tree stay out of the run; both run through the same interpreter::

    python benchmarks/ab_wall.py BEFORE AFTER [--command optimize] [--rounds 5] [--models bert.legacy14_dyn ...]

Prints, per model, the min and median wall time of each commit and the ratio AFTER/BEFORE (min), and appends the
raw runs to benchmarks/_work/ab_wall.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASE = HERE / "_work" / "base"
RAW = HERE / "_work" / "ab_wall.json"
DEFAULT_MODELS = ("bert.legacy14_dyn", "gpt2.legacy14_dyn", "vit.dynamo_dyn", "llama.dynamo_dyn")


def snapshot(commit: str, into: Path) -> Path:
    """The package, built-in plugins and patterns of ``commit``, importable from ``into``."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "gsrewrite", "plugins", "patterns"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "gsrewrite_patterns").symlink_to(into / "patterns")
    return into


def run_once(snap: Path, command: str, model: Path, out_dir: Path) -> float:
    env = dict(os.environ, PYTHONPATH=f"{snap}{os.pathsep}{snap / 'plugins'}", OMP_NUM_THREADS="1")
    out = out_dir / f"{model.stem}.out.onnx"
    argv = ["gsrewrite", "-q", command, str(model), "-o", str(out)]
    code = f"import sys; from gsrewrite.cli import main; sys.argv = {argv!r}; main()"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=out_dir)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{snap.name} {model.name}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    for leftover in out_dir.iterdir():
        leftover.unlink()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--command", default="optimize")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        snaps = {name: snapshot(commit, Path(tmp) / name)
                 for name, commit in (("before", args.before), ("after", args.after))}
        out_dir = Path(tmp) / "out"
        out_dir.mkdir()
        times: dict[str, dict[str, list[float]]] = {m: {"before": [], "after": []} for m in args.models}
        for round_ in range(args.rounds):
            for model in args.models:
                order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
                for name in order:
                    times[model][name].append(run_once(snaps[name], args.command, BASE / f"{model}.onnx", out_dir))
    print(f"{args.command}: {args.before} -> {args.after}, {args.rounds} interleaved rounds (s)")
    print(f"{'model':24} {'before min':>10} {'after min':>10} {'before med':>10} {'after med':>10} {'ratio':>6}")
    for model, runs in times.items():
        b, a = runs["before"], runs["after"]
        print(f"{model:24} {min(b):10.2f} {min(a):10.2f} {statistics.median(b):10.2f} "
              f"{statistics.median(a):10.2f} {min(a) / min(b):6.3f}")
    RAW.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(RAW.read_text()) if RAW.exists() else []
    history.append({"command": args.command, "before": args.before, "after": args.after, "times": times})
    RAW.write_text(json.dumps(history, indent=1))


if __name__ == "__main__":
    main()
