"""``apply`` wall time on real models, as a ratio to onnx.load + onnx.save of the same model (goal <= 3).

For each model of the folder: the median of ``--repeat`` runs of load -> ``gsrewrite.pipelines.apply(model,
["all"])`` -> save (what ``gsrewrite apply --pattern all`` does, minus interpreter start-up), once with
``validate=False`` and once validated, each divided by the median of ``onnx.load`` + ``onnx.save``. Also
reports what was fused, the validation verdict, and (``--profile``) the hot spots of the slowest model.
Writes benchmarks/results/apply_time.md.

    python benchmarks/apply_time.py                          # every model of ../shared/models
    python benchmarks/apply_time.py --quick                  # four models, one run each
    python benchmarks/apply_time.py --models DIR --only 'bert.*' --profile
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import _markdown as md
from _models import DEFAULT_FOLDER, ModelCase, discover
from _stages import STAGES, stage_times
from _timing import load_save_seconds, median_of, profile

HERE = Path(__file__).resolve().parent
GOAL = 3.0


@dataclass
class Row:
    """One model's measurements (seconds)."""

    case: ModelCase
    nodes: int = 0
    size: int = 0
    baseline: float = 0.0
    plain: float = 0.0
    validated: float = 0.0
    engine: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    verdict: str = ""
    stages: dict[str, float] = field(default_factory=dict)


def run_once(path: Path, out: Path, validate: bool, target: str):  # type: ignore[no-untyped-def]
    """load -> apply(all) -> save; returns the RewriteResult."""
    from gsrewrite.model_io import load_model, save_model
    from gsrewrite.pipelines import apply

    result = apply(load_model(path), ["all"], target=target, validate=validate)
    save_model(result.model, out, input_path=path)
    return result


def measure(case: ModelCase, repeat: int, target: str) -> Row:
    """Time one model with and without validation."""
    import onnx

    row = Row(case, size=case.path.stat().st_size)
    row.nodes = len(onnx.load(str(case.path), load_external_data=False).graph.node)
    row.baseline = load_save_seconds(case.path, repeat=max(3, repeat))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.onnx"
        row.plain, _ = median_of(lambda: run_once(case.path, out, False, target), repeat)
        row.validated, result = median_of(lambda: run_once(case.path, out, True, target), repeat)
    row.engine = result.seconds
    row.stages = stage_times(case.path, target, repeat)
    row.counts = dict(result.counts)
    row.verdict = _verdict(result)
    return row


def _verdict(result) -> str:  # type: ignore[no-untyped-def]
    if result.dropped:
        return "dropped " + ", ".join(result.dropped)
    if result.validation is None:
        return "unchanged" if not result.changed else "not validated"
    return "ok" if result.validation.ok else "FAILED"


def _report(rows: list[Row], target: str, hot: list | None, profiled: str | None) -> str:
    headers = ["model", "nodes", "size", "load+save", "apply", "ratio", "apply+validate", "ratio", "fused",
               "validation"]
    body = [[r.case.name, r.nodes, md.size(r.size), md.seconds(r.baseline), md.seconds(r.plain),
             md.ratio(r.plain / r.baseline), md.seconds(r.validated), md.ratio(r.validated / r.baseline),
             ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items())) or "none", r.verdict] for r in rows]
    worst_plain = max(r.plain / r.baseline for r in rows)
    worst_val = max(r.validated / r.baseline for r in rows)
    lines = ["# apply wall time", "", md.machine_line(), "",
             f"load -> `apply(model, [\"all\"], target=\"{target}\")` -> save, median of the runs, as a ratio to "
             "`onnx.load` + `onnx.save` of the same model (goal <= 3).", "", md.table(headers, body), "",
             f"- without validation: worst ratio {worst_plain:.2f}x -> **{'PASS' if worst_plain <= GOAL else 'FAIL'}**",
             f"- with validation: worst ratio {worst_val:.2f}x -> **{'PASS' if worst_val <= GOAL else 'FAIL'}**"]
    if any(r.stages for r in rows):
        lines += ["", "## Where the time goes (ms, median per step; the engine's steps timed one by one)", "",
                  md.table(["model", "load+save", *STAGES], [
                      [r.case.name, f"{r.baseline * 1e3:.1f}", *(_ms(r.stages.get(s)) for s in STAGES)]
                      for r in rows if r.stages])]
    if hot:
        lines += ["", f"## Hot spots (cProfile of load + apply + validate + save on {profiled}, by own time)", "",
                  md.table(["function", "calls", "own", "cumulative"],
                           [[f"`{f}`", c, md.seconds(o), md.seconds(cu)] for f, c, o, cu in hot])]
    return "\n".join(lines) + "\n"


def _ms(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds * 1e3:.1f}"


def _profile(rows: list[Row], name: str | None, target: str) -> tuple[list, str]:
    chosen = next((r for r in rows if r.case.name == name), None) if name else \
        max(rows, key=lambda r: r.validated / r.baseline)
    if chosen is None:
        sys.exit(f"--profile: no model named {name!r} was measured")
    with tempfile.TemporaryDirectory() as tmp:
        hot = profile(lambda: run_once(chosen.case.path, Path(tmp) / "out.onnx", True, target), top=25)
    return hot, chosen.case.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--models", type=Path, default=DEFAULT_FOLDER, help="folder of X.onnx models")
    parser.add_argument("--only", action="append", metavar="GLOB", help="model names to run (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per model and mode (median is kept)")
    parser.add_argument("--target", choices=["ort", "onnx"], default="ort")
    parser.add_argument("--quick", action="store_true", help="four models, one run each")
    parser.add_argument("--profile", nargs="?", const="", metavar="MODEL",
                        help="cProfile one model (default: the slowest relative to load+save)")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "apply_time.md")
    args = parser.parse_args(argv)
    cases = discover(args.models, args.only, args.quick)
    if not cases:
        sys.exit(f"no models in {args.models}")
    repeat = 1 if args.quick else args.repeat
    with tempfile.TemporaryDirectory() as tmp:  # warm-up: imports and onnxruntime start-up are not measured
        run_once(cases[0].path, Path(tmp) / "out.onnx", True, args.target)
    rows = []
    for case in cases:
        rows.append(measure(case, repeat, args.target))
        r = rows[-1]
        print(f"{case.name:<24} load+save {md.seconds(r.baseline):>9}  apply {r.plain / r.baseline:5.2f}x  "
              f"validated {r.validated / r.baseline:5.2f}x  {r.verdict}", flush=True)
    hot, profiled = _profile(rows, args.profile or None, args.target) if args.profile is not None else (None, None)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(_report(rows, args.target, hot, profiled))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
