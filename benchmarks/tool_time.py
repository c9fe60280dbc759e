"""Tool time over onnx.load + onnx.save on the base-width exports (issue 17 target: gsrewrite <= onnxsim's,
validation included). Each tool runs in its own process (CLI as users run it), interleaved; min of N.

    python benchmarks/tool_time.py --rounds 3 bert.legacy14_dyn gpt2.legacy14_dyn
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = HERE / "_work" / "base"
BIN = Path(sys.executable).parent

# users' installs have compiled bytecode (pip compiles on install): every tool runs with it, not recompiling its
# imports in each process as PYTHONDONTWRITEBYTECODE=1 (set on these machines) would make it
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}

BASELINE = "import onnx, sys; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])"
ONNXSIM = "import onnx, onnxsim, sys; m, ok = onnxsim.simplify(onnx.load(sys.argv[1])); onnx.save(m, sys.argv[2])"


def commands(model: Path, out: Path) -> dict[str, list[str]]:
    return {
        "load+save": [sys.executable, "-c", BASELINE, str(model), str(out)],
        "gsrewrite simplify": [str(BIN / "gsrewrite"), "-q", "simplify", str(model), str(out), "--force"],
        "gsrewrite optimize": [str(BIN / "gsrewrite"), "-q", "optimize", str(model), str(out), "--force"],
        "onnxsim": [sys.executable, "-c", ONNXSIM, str(model), str(out)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            runs: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                for tool, cmd in commands(BASE / f"{name}.onnx", Path(tmp) / "out.onnx").items():
                    start = time.perf_counter()
                    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
                    seconds = time.perf_counter() - start
                    if done.returncode != 0:
                        raise SystemExit(f"{tool} on {name}: {done.stderr[-300:]}")
                    runs.setdefault(tool, []).append(seconds)
            base = min(runs["load+save"])
            print(f"{name}: " + ", ".join(f"{tool} {min(t):.2f} s ({min(t) / base:.2f}x)" for tool, t in runs.items()))


if __name__ == "__main__":
    main()
