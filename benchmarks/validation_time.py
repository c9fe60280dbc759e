"""Validation time: ``gsrewrite.validate(m, m)`` of this tree against another revision, interleaved.

Issue 13 made validation run every family of dynamic dims at three sizes (with a memory estimate first); its
target is at most 1.5x the single-size time. This script times ``validate`` of each model against itself in
a fresh process per revision and round (imports and the first call excluded, median of ``--runs`` calls),
alternating revisions, and writes the minimum over rounds per model::

    git worktree add /tmp/base 682d495          # the revision to compare with
    .venv/bin/python benchmarks/validation_time.py --base /tmp/base --rounds 2

Output: benchmarks/results/validation_time.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_MODELS = ROOT.parent / "shared" / "models"

WORKER = r"""
import json, statistics, sys, time
import onnx
from gsrewrite.validation import validate
out = {}
for path in sys.argv[2:]:
    model = onnx.load(path)
    validate(model, model)
    times = []
    for _ in range(int(sys.argv[1])):
        start = time.perf_counter()
        validate(model, model)
        times.append(time.perf_counter() - start)
    out[path] = statistics.median(times)
print(json.dumps(out))
"""


def _time(tree: Path | None, models: list[Path], runs: int) -> dict[str, float]:
    env = dict(os.environ)
    if tree is not None:  # the other revision's sources first on the path
        env["PYTHONPATH"] = str(tree)
    result = subprocess.run([sys.executable, "-c", WORKER, str(runs), *map(str, models)], env=env, check=True,
                            capture_output=True, text=True, cwd="/")
    return {Path(k).stem: v for k, v in json.loads(result.stdout).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of the revision to compare with")
    parser.add_argument("--models", type=Path, default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "validation_time.md")
    args = parser.parse_args(argv)
    models = sorted(args.models.glob("*.onnx"))
    base: list[dict[str, float]] = []
    new: list[dict[str, float]] = []
    for _ in range(args.rounds):
        base.append(_time(args.base, models, args.runs))
        new.append(_time(None, models, args.runs))
    rows, ratios = [], []
    for name in base[0]:
        b, n = min(r[name] for r in base), min(r[name] for r in new)
        ratios.append(n / b)
        rows.append(f"| {name} | {b * 1e3:.0f} | {n * 1e3:.0f} | {n / b:.2f}x |")
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    text = "\n".join([
        "# Validation time: three size sets against one", "",
        f"`validate(m, m)`, median of {args.runs} calls per process, min over {args.rounds} interleaved rounds; "
        f"base = `{args.base}`.", "",
        "| model | base ms | now ms | ratio |", "|---|---|---|---|", *rows, "",
        f"Geomean {geomean:.2f}x, max {max(ratios):.2f}x.", "",
    ])
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
