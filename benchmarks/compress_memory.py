"""Peak memory and wall time of ``gsrewrite compress`` against the model's weight bytes (issue 27: <= 1.5x the
weights for int4 and dynamic-int8, validation included; a compress that misses its tolerance ends its
bisection within 5x one compress).

    .venv/bin/python benchmarks/compress_memory.py MODEL.onnx [--only NAME ...] > benchmarks/results/compress_memory.md

Each case runs the installed ``gsrewrite -v compress`` in a subprocess under ``/usr/bin/time -v`` (peak RSS: its
"Maximum resident set size", the kernel's high-water mark of the whole process), one case at a time; the
``-v`` stage lines give each stage's peak (``gsrewrite/stages.py``). Cases: each strategy with a tolerance
it meets and ``--allow-slower`` (one compress: quantize, validate, latency bench, save), with its default
tolerance, and int4 with
``--min-top1 0.999``, which a random-weight model misses, so that the bisection runs. The weights are the
model's initializers' declared bytes. Nothing is kept: outputs go to a temporary folder. Run it on a quiet
machine with memory to spare (check ``free -g`` first): a case's peak is its own process's.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: name -> strategy and options
CASES: dict[str, list[str]] = {
    "int4 (met)": ["-s", "int4", "--min-cosine", "0.5", "--min-top1", "0", "--min-agreement", "0", "--allow-slower"],
    "int4 (default tolerance)": ["-s", "int4"],
    "int4 --min-top1 0.999 (bisects)": ["-s", "int4", "--min-top1", "0.999"],
    "dynamic-int8 (met)": ["-s", "dynamic-int8", "--min-cosine", "0.5", "--min-top1", "0", "--min-agreement", "0",
                           "--allow-slower"],
    "dynamic-int8 (default tolerance)": ["-s", "dynamic-int8"],
}
GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def weight_bytes(model: str) -> int:
    from gsrewrite.pipelines.compress import weight_bytes as declared
    from gsrewrite.pipelines.options import Source

    return declared(Source.mapped(model).model)


@dataclass
class Case:
    peak: int
    wall: float
    exit: int
    verdict: str
    stages: list[tuple[str, str, str]] = field(default_factory=list)
    timings: dict[str, str] = field(default_factory=dict)


def run_case(model: str, args: list[str], folder: str) -> Case:
    out = Path(folder, "out.onnx")
    cmd = ["/usr/bin/time", "-v", str(GSREWRITE), "-v", "compress", model, str(out), "--force", *args]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    peak_kib = int(found.group(1)) if found else 0
    stages = re.findall(r"INFO: (.+?): [\d.]+ s, peak RSS ([\d.]+) GB \(([\d.]+)x weights\)", done.stderr)
    timings = dict(re.findall(r"INFO: ([^\n]+?): ([\d.]+) s[,\n]", done.stderr))
    verdict = "written" if done.returncode == 0 else next(
        (line for line in done.stderr.splitlines() if line.startswith("error:")), f"exit {done.returncode}")
    for path in Path(folder).iterdir():
        path.unlink()
    return Case(peak_kib * 1024, wall, done.returncode, verdict[:140], stages, timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--only", action="append", help="case names to run (default: all)")
    options = parser.parse_args()
    weights = weight_bytes(options.model)
    print(f"# compress memory: {Path(options.model).name}\n")
    print(f"weights: {weights / 1e9:.3f} GB (declared initializer bytes); `gsrewrite -v compress` under "
          "/usr/bin/time -v, one case at a time\n")
    print("| case | exit | peak RSS | x weights | wall | stages (peak x weights, s) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="compress-memory-") as folder:
        for name, args in CASES.items():
            if options.only and name not in options.only:
                continue
            result = run_case(options.model, args, folder)
            stages = "; ".join(f"{stage} {ratio}x {result.timings.get(stage, '?')} s"
                               for stage, _gb, ratio in result.stages)
            print(f"| {name} | {result.exit} | {result.peak / 1e9:.2f} GB | {result.peak / weights:.2f}x | "
                  f"{result.wall:.0f} s | {stages} |", flush=True)
            print(f"<!-- {name}: {result.verdict} -->", flush=True)


if __name__ == "__main__":
    main()
