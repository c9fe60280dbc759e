"""Side-by-side benchmark: gsrewrite and peer optimizers on a folder of models; writes benchmarks/RESULTS.md.

For every model ``X.onnx`` (with ``X.inputs.npz`` and ``X.outputs.npz``) and every tool, in one command:
the tool runs in its own subprocess (timed: load -> optimize -> save); then every output is counted (fused
ops, nodes, file size), checked against the reference outputs and timed in onnxruntime (CPU, 1 thread,
graph optimizations disabled and enabled). The report has a table per metric (models x tools) and the
target checks of issues 4 and 5. Raw numbers go to benchmarks/results/compare.json.

    python benchmarks/compare.py                              # every model of ../shared/models, all tools
    python benchmarks/compare.py --quick                      # four models, 10 latency runs
    python benchmarks/compare.py --models tests/fixtures/models --tools gsrewrite,ort-transformers
    python benchmarks/compare.py --report-only                # re-render RESULTS.md from compare.json

Tools: gsrewrite (``optimize`` when available, else ``apply --pattern all``; validated), gsrewrite-noval,
gsrewrite-simplify, ort-transformers (onnxruntime.transformers.optimizer with the family's model_type),
ort-transformers-hinted (same, told num_heads/hidden_size read from the model), onnxscript
(optimize_for_ort), onnxsim, onnxslim, onnxoptimizer, scs4onnx (shrink).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import _isolate
import _markdown as md
import _metrics
import _report
import _results
from _hints import attention_hints
from _models import DEFAULT_FOLDER, ModelCase, discover, expected_for, expected_fusions
from _results import ORIGINAL, Cell, ModelResult
from _timing import load_save_seconds
from _tools import TOOLS

HERE = Path(__file__).resolve().parent
PACKAGES = ["gsrewrite", "onnxruntime", "onnxscript", "onnxsim", "onnxslim", "onnxoptimizer", "scs4onnx"]


def run_tool(tool: str, case: ModelCase, hints: dict, folder: Path, timeout: float) -> Cell:
    """One tool on one model, in its own process; the output lands in ``folder`` (empty before)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{case.name}.onnx"
    data = _isolate.run("tool", [tool, str(case.path), str(out), json.dumps(hints)], timeout)
    cell = Cell(seconds=data.get("seconds"), note=data.get("note", ""), error=data.get("error", ""),
                unavailable=data.get("unavailable", ""))
    if out.exists() and not cell.unavailable:
        _describe(cell, out, folder)
    return cell


def _describe(cell: Cell, path: Path, folder: Path) -> None:
    try:
        ops = _metrics.op_counts(path)
    except Exception as exc:  # an unreadable output is the tool's failure
        cell.error = cell.error or f"output does not load: {str(exc).splitlines()[0][:200]}"
        return
    cell.ops, cell.fused, cell.size = dict(ops), _metrics.fused_counts(ops), _metrics.output_size(folder)


def check_outputs(case: ModelCase, outputs: dict[str, Path], cells: dict[str, Cell], timeout: float) -> None:
    """Max abs diff of each output against the reference (one process each: ORT may abort on bad models)."""
    if case.inputs is None:
        return
    for tool, path in outputs.items():
        ref = str(case.outputs) if case.outputs else "-"
        data = _isolate.run("probe", [str(path), str(case.inputs), ref], timeout)
        cell = cells[tool]
        cell.max_diff = data.get("max_diff")
        if data.get("error"):
            cell.error = (cell.error + "; " if cell.error else "") + f"onnxruntime: {data['error']}"
        if data.get("note"):
            cell.note = (cell.note + "; " if cell.note else "") + data["note"]


def measure_latency(case: ModelCase, outputs: dict[str, Path], cells: dict[str, Cell], runs: int,
                    timeout: float) -> None:
    """Latencies of every output that ran, interleaved in one process; one process each if that one fails."""
    runnable = {t: p for t, p in outputs.items() if not cells[t].error}
    if case.inputs is None or not runnable:
        return
    data = _isolate.run("latency", [str(case.inputs), str(runs), *map(str, runnable.values())], timeout)
    if "error" in data and len(runnable) > 1:
        for tool, path in runnable.items():
            measure_latency(case, {tool: path}, cells, runs, timeout)
        return
    for tool, path in runnable.items():
        cells[tool].latency = data.get("latency", {}).get(str(path), {})


def run_model(case: ModelCase, tools: list[str], manifest: dict, work: Path, args: argparse.Namespace) -> ModelResult:
    """Every tool on one model, then every measurement."""
    found = attention_hints(case.path, case.inputs)
    hints = {"model_type": case.ort_model_type, "num_heads": found[0] if found else 0,
             "hidden_size": found[1] if found else 0}
    result = ModelResult(case.name, case.family, case.is_transformer, load_save_seconds(case.path), hints,
                         expected_for(case, manifest))
    original = Cell(note="input model")
    _describe(original, case.path, case.path.parent)
    original.size = case.path.stat().st_size
    result.cells[ORIGINAL] = original
    outputs = {ORIGINAL: case.path}
    for tool in tools:
        cell = run_tool(tool, case, hints, work / case.name / tool, args.timeout)
        result.cells[tool] = cell
        if cell.ok:
            outputs[tool] = work / case.name / tool / f"{case.name}.onnx"
        print(f"  {tool:<24} {_summary(cell)}", flush=True)
    _time_again(case, tools, hints, work, result.cells, args)
    check_outputs(case, outputs, result.cells, args.timeout)
    measure_latency(case, outputs, result.cells, args.runs, args.timeout * 4)
    for cell in result.cells.values():  # no machine paths in the report
        cell.error = cell.error.replace(str(work / case.name), "OUT")
    return result


def _time_again(case: ModelCase, tools: list[str], hints: dict, work: Path, cells: dict[str, Cell],
                args: argparse.Namespace) -> None:
    """Run every tool that worked ``--tool-runs - 1`` more times, round-robin (a load change on the machine hits
    every tool alike); its wall time is the median of all runs. The first run's output is the one measured.
    Every run writes a new file (its own folder), as the first did: replacing an existing output is a different
    case (gsrewrite fsyncs a file it replaces; onnx.save truncates and rewrites it)."""
    times = {t: [cells[t].seconds] for t in tools if cells[t].ok and cells[t].seconds is not None}
    for repeat in range(1, args.tool_runs):
        for tool in times:
            again = run_tool(tool, case, hints, work / case.name / f"{tool}.again{repeat}", args.timeout)
            if again.ok and again.seconds is not None:
                times[tool].append(again.seconds)
    for tool, seconds in times.items():
        cells[tool].seconds = statistics.median(seconds)


def _summary(cell: Cell) -> str:
    if cell.unavailable:
        return f"n/a: {cell.unavailable}"
    if not cell.ok:
        return f"FAILED: {cell.error}"
    fused = ", ".join(f"{k} {v}" for k, v in cell.fused.items())
    return f"{cell.seconds:.2f} s, {cell.nodes} nodes, {fused}"


def _compile_gsrewrite() -> None:
    """Byte-compile gsrewrite's own modules, as pip does for every installed peer: in an editable checkout with
    PYTHONDONTWRITEBYTECODE set, each timed run would otherwise compile them from source."""
    import compileall

    import gsrewrite

    for folder in (Path(gsrewrite.__file__).parent, HERE.parent / "plugins"):
        if folder.is_dir():
            compileall.compile_dir(str(folder), quiet=1)


def _shown(folder: Path) -> str:
    """``folder`` relative to the checkout when it is inside it or next to it (no machine paths in reports)."""
    root = HERE.parent
    for base, prefix in ((root, ""), (root.parent, "../")):
        try:
            return prefix + str(folder.resolve().relative_to(base))
        except ValueError:
            continue
    return str(folder)


def _versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--models", type=Path, default=DEFAULT_FOLDER, help="folder of X.onnx + X.*.npz")
    parser.add_argument("--only", action="append", metavar="GLOB", help="model names to run (repeatable)")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, from: {', '.join(TOOLS)}")
    parser.add_argument("--runs", type=int, default=200,
                        help="latency runs per output (median; >= 30 for RESULTS; ~1 ms models need ~200 "
                             "to resolve 2%%)")
    parser.add_argument("--tool-runs", type=int, default=5, help="runs of each tool per model (median wall time)")
    parser.add_argument("--quick", action="store_true", help="four models and 10 latency runs")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per tool run")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep every output model in DIR")
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "compare.json", help="raw results")
    parser.add_argument("--report-only", action="store_true", help="re-render the report from --json")
    args = parser.parse_args(argv)
    unknown = [t for t in args.tools.split(",") if t not in TOOLS]
    if unknown:
        parser.error(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(TOOLS)}")
    if args.quick:
        args.runs = min(args.runs, 10)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.report_only:
        results, meta = _results.load(args.json)
    else:
        tools = args.tools.split(",")
        _compile_gsrewrite()
        cases = discover(args.models, args.only, args.quick)
        if not cases:
            sys.exit(f"no models in {args.models}")
        manifest = expected_fusions(args.models)
        work = args.keep or Path(tempfile.mkdtemp(prefix="gsrewrite-compare-"))
        results = []
        try:
            for case in cases:
                print(f"{case.name}", flush=True)
                results.append(run_model(case, tools, manifest, work, args))
        finally:
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)
        meta = {"tools": tools, "runs": args.runs, "tool_runs": args.tool_runs, "folder": _shown(args.models),
                "versions": _versions(),
                "measured": md.machine_line()}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        _results.save(results, meta, args.json)
    args.output.write_text(_report.render(results, meta))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
