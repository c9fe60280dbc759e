"""Does the speed plumbing earn its place? Wall time of ``gsrewrite optimize|simplify`` with each piece ON
(everything as shipped) and OFF (that one piece disabled), interleaved, on base-width exports.

The pieces left, and how each is turned OFF (no code edited):

- ``staged_save``: ``gsrewrite.model_io.staging.StagedSave.begin`` does nothing, so nothing is written ahead
  while validation runs and ``StagedSave.save`` saves the result after it (``save_model``, in the main thread).
- ``in_memory``: ``gsrewrite.validation.runner.in_memory_model`` returns ``None``, so validation sessions get the
  whole serialized model instead of a small graph plus its weights as arrays.
- ``no_prepacking``: validation sessions prepack GEMM weights (onnxruntime's default) instead of
  ``session.disable_prepacking``.
- ``no_spinning``: validation sessions' idle pool threads spin (onnxruntime's default) instead of
  ``session.intra_op.allow_spinning=0``.

Issue 26 measured these with ``--pieces`` and ``--raw`` (benchmarks/results/validation_sessions.md), together
with two pieces removed after it: one thread for models under 64 MB of weights, and validation skipping
onnxruntime's memory-reuse planning for small generated inputs (``no_reuse``: ``Validator``'s small-inputs
guess patched to never hold, from a copy of the package at 1774cee).

The parse cache, the allocator tuning and fast_import were measured the same way and removed (the first part of
benchmarks/results/plumbing.md, from a copy of the package at commit 2a24b7c). Put a copy of the package first on
the path (``git archive HEAD gsrewrite plugins patterns | tar -x -C SNAP``; ``PYTHONPATH=SNAP:SNAP/plugins``
and ``gsrewrite_patterns`` linked to ``SNAP/patterns``), which keeps other engineers' edits of the work tree out
of a run. Every run goes through this file's ``run`` mode (same interpreter start-up for ON and OFF)::

    PYTHONPATH=... python benchmarks/plumbing.py measure --rounds 5   # appends to benchmarks/_work/plumbing.json
    python benchmarks/plumbing.py report        # the markdown tables of benchmarks/results/staged_save.md
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
from typing import Any

HERE = Path(__file__).resolve().parent
BASE = HERE / "_work" / "base"
RAW = HERE / "_work" / "plumbing.json"
PIECES = ("staged_save", "in_memory", "no_prepacking", "no_spinning")
COMMANDS = ("optimize", "simplify")
THRESHOLD = 0.05


def _disable_staged_save() -> None:
    from gsrewrite.model_io import staging

    staging.StagedSave.begin = lambda self, model, data: None  # type: ignore[method-assign]


def _disable_in_memory() -> None:
    from gsrewrite.validation import runner

    runner.in_memory_model = lambda model, data=None: None  # type: ignore[assignment]


def _session_entry(key: str, value: str) -> None:
    """Validation sessions get ``key=value`` after the shipped options (a later entry replaces an earlier one)."""
    from gsrewrite.validation import runner

    shipped = runner._validation_options

    def options(reuse_memory: bool) -> Any:
        made = shipped(reuse_memory)
        made.add_session_config_entry(key, value)
        return made

    runner._validation_options = options


_DISABLE = {
    "staged_save": _disable_staged_save,
    "in_memory": _disable_in_memory,
    "no_prepacking": lambda: _session_entry("session.disable_prepacking", "0"),
    "no_spinning": lambda: _session_entry("session.intra_op.allow_spinning", "1"),
}


def run(config: str, argv: list[str]) -> None:
    """Run the CLI in this process with ``config``'s piece turned off (``on``: nothing patched)."""
    if config != "on":
        _DISABLE[config]()
    from gsrewrite.cli import main

    main(argv, prog_name="gsrewrite")


def _time_once(config: str, command: str, model: str, out_dir: str) -> float:
    output = os.path.join(out_dir, f"{model}.{command}.onnx")
    args = [sys.executable, str(Path(__file__).resolve()), "run", config, "--", command,
            str(BASE / f"{model}.onnx"), "-o", output]
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{config} {command} {model} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    os.remove(output)
    return elapsed


def measure(models: list[str], commands: list[str], rounds: int, pieces: list[str], raw_path: Path) -> None:
    """Interleaved runs (one of each config per round, the order rotating), appended to the raw JSON."""
    CONFIGS = ("on", *pieces)
    raw: dict[str, Any] = json.loads(raw_path.read_text()) if raw_path.exists() else {}
    with tempfile.TemporaryDirectory(prefix="gsrewrite-plumbing-") as out_dir:
        for command in commands:
            for model in models:
                _time_once("on", command, model, out_dir)  # warm the page cache
                times = raw.setdefault(command, {}).setdefault(model, {})
                for r in range(rounds):
                    order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
                    for config in order:
                        times.setdefault(config, []).append(_time_once(config, command, model, out_dir))
                    raw_path.write_text(json.dumps(raw, indent=1))
                    print(command, model, "round", r, {c: round(times[c][-1], 3) for c in CONFIGS}, flush=True)


def _row(model: str, command: str, on: list[float], off: list[float], quiet_from: int) -> str:
    quiet_on, quiet_off = on[quiet_from:], off[quiet_from:]
    med_on, med_off = statistics.median(quiet_on), statistics.median(quiet_off)
    return (f"| {command} | {model} | {len(on)} | {min(on):.3f} | {min(off):.3f} | {min(off) / min(on):.3f} "
            f"| {len(quiet_on)} | {med_on:.3f} | {med_off:.3f} | {med_off / med_on:.3f} |")


def report(raw_path: Path, title: str, quiet_from: int = 0) -> str:
    """The markdown tables: per piece, ON and OFF wall time per command and model. Min over every run; median
    over the runs from ``quiet_from`` on."""
    raw = json.loads(raw_path.read_text())
    lines = [f"# {title}: ON vs OFF on base-width exports (issue 26)", "",
             "Wall time (s) of `gsrewrite COMMAND MODEL -o OUT` as a subprocess (`benchmarks/plumbing.py`; the "
             "exports of `benchmarks/make_base_width.py`: hidden 768, 12 heads, 6 layers, seq 128, 255-312 MB). "
             "ON = as shipped, OFF = that one piece disabled; the configurations interleaved per round "
             "(rotating order) on a shared 2-core VM. ratio = OFF / ON (> 1: the piece saves time). A piece stays "
             f"when it saves >= {THRESHOLD:.0%} of wall time: ratio >= {1 / (1 - THRESHOLD):.3f}.", "",
             f"`min`: over all runs. `median`: over runs {quiet_from + 1}.. .", ""]
    for piece in [p for p in PIECES if any(p in t for per in raw.values() for t in per.values())]:
        lines += [f"## {piece}", "", "| command | model | runs | ON min | OFF min | ratio min | quiet runs "
                  "| ON median | OFF median | ratio median |", "|---|---|---|---|---|---|---|---|---|---|"]
        savings = []
        for command, per_model in raw.items():
            for model, times in per_model.items():
                if piece in times:
                    lines.append(_row(model, command, times["on"], times[piece], quiet_from))
                    savings.append(1 - min(times["on"]) / min(times[piece]))
        verdict = "keep" if statistics.median(savings) >= THRESHOLD else "remove"
        lines += ["", f"Saving by min: {min(savings):+.1%} to {max(savings):+.1%}, median "
                  f"{statistics.median(savings):+.1%} over the {len(savings)} command x model cells. "
                  f"Decision: **{verdict}**.", ""]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "run":
        sep = sys.argv.index("--")
        run(sys.argv[2], sys.argv[sep + 1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--models", nargs="+", default=["bert.legacy14_dyn", "bert.dynamo_dyn", "gpt2.legacy14_dyn",
                                                   "gpt2.dynamo_dyn"])
    m.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS)
    m.add_argument("--rounds", type=int, default=5)
    m.add_argument("--pieces", nargs="+", default=["staged_save"], choices=PIECES)
    r = sub.add_parser("report")
    r.add_argument("--title", default="The staged save")
    for each in (m, r):
        each.add_argument("--raw", type=Path, default=RAW, help="the raw JSON (default: %(default)s)")
    args = parser.parse_args()
    if args.mode == "measure":
        measure(args.models, args.commands, args.rounds, args.pieces, args.raw)
    else:
        print(report(args.raw, args.title))


if __name__ == "__main__":
    main()
