"""The targets of issues 4 (fusions) and 5 (simplify), checked on compare.py's results.

Each check gives one line: PASS/FAIL, how many models pass, and the per-model ratios. Comparisons against
the onnxruntime transformers optimizer use its better column (with or without the num_heads/hidden_size
hints) for each model, so that a PASS holds against either way of running it. A peer output that
onnxruntime cannot run is not a bar to clear: comparisons use only peer outputs that run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from _results import ORIGINAL, Cell, ModelResult

TOLERANCE = 1e-4
ORT_COLUMNS = ("ort-transformers", "ort-transformers-hinted")
SIMPLIFIERS = ("onnxsim", "onnxslim", "onnxoptimizer")


@dataclass
class Check:
    """One target: its text, and per model (name, passed, detail); None = not applicable."""

    title: str
    rows: list[tuple[str, bool, str]]

    def line(self) -> str:
        if not self.rows:
            return f"- **n/a** {self.title}: no model to check (tool not run or not applicable)"
        failed = [f"{name} ({detail})" for name, ok, detail in self.rows if not ok]
        passed = [f"{name} {detail}" for name, ok, detail in self.rows if ok and detail]
        verdict = "FAIL" if failed else "PASS"
        text = f"- **{verdict}** {self.title}: {len(self.rows) - len(failed)}/{len(self.rows)} models"
        if failed:
            text += f". Failing: {'; '.join(failed)}"
        if passed:
            text += f"{'. Passing' if failed else ''} ({'; '.join(passed)})"
        return text


def _per_model(results: list[ModelResult], title: str,
               judge: Callable[[ModelResult], tuple[bool, str] | None]) -> Check:
    rows = []
    for result in results:
        verdict = judge(result)
        if verdict is not None:
            rows.append((result.name, *verdict))
    return Check(title, rows)


def runs(cell: Cell) -> bool:
    """The tool wrote a model and onnxruntime ran it without error."""
    return cell.ok and not cell.error


def _best_ort(result: ModelResult, key: Callable[[Cell], float | None], lowest: bool) -> float | None:
    values = [key(result.cell(t)) for t in ORT_COLUMNS if runs(result.cell(t))]
    values = [v for v in values if v is not None]
    if not values:
        return None
    return min(values) if lowest else max(values)


def _latency(cell: Cell) -> float | None:
    return cell.latency.get("enabled")


# --- issue 4 ---------------------------------------------------------------------------------------------
def complete(result: ModelResult, tool: str) -> tuple[bool, str] | None:
    """Every expected fusion present and outputs within TOLERANCE."""
    cell = result.cell(tool)
    if not result.expected or cell.unavailable:
        return None
    if not cell.ok:
        return False, cell.error or "no output"
    missing = [f"{k} {cell.fused.get(k, 0)}/{v}" if k != "bn_left" else f"{cell.fused.get(k, 0)} BN left"
               for k, v in result.expected.items() if cell.fused.get(k, 0) != v]
    if cell.max_diff is None or cell.max_diff > TOLERANCE:
        missing.append(f"max diff {cell.max_diff if cell.max_diff is not None else 'n/a'}")
    return (not missing), ", ".join(missing)


def counts_vs_ort(result: ModelResult, tool: str) -> tuple[bool, str] | None:
    cell = result.cell(tool)
    if cell.unavailable or not any(runs(result.cell(t)) for t in ORT_COLUMNS):
        return None
    worse = []
    for key in ("attention", "norm", "gelu"):
        ort = _best_ort(result, lambda c, key=key: c.fused.get(key, 0), lowest=False) or 0
        if cell.fused.get(key, 0) < ort:
            worse.append(f"{key} {cell.fused.get(key, 0)} < {ort}")
    return (not worse and cell.ok), ", ".join(worse) or ("" if cell.ok else cell.error)


def latency_vs(result: ModelResult, tool: str) -> tuple[bool, str] | None:
    mine = _latency(result.cell(tool))
    if not result.is_transformer or result.cell(tool).unavailable:
        return None
    ort, original = _best_ort(result, _latency, lowest=True), _latency(result.cell(ORIGINAL))
    if mine is None or original is None:
        return False, "latency not measured"
    if ort is None:  # the transformers optimizer failed on this model: only the original to compare with
        return mine < original, f"transformers optimizer failed, {mine / original:.2f}x original"
    return mine <= ort and mine < original, f"{mine / ort:.2f}x ORT-opt, {mine / original:.2f}x original"


def time_vs_ort(result: ModelResult, tool: str) -> tuple[bool, str] | None:
    mine = result.cell(tool).seconds
    ort = _best_ort(result, lambda c: c.seconds, lowest=True)
    if result.cell(tool).unavailable or ort is None:
        return None
    if mine is None:
        return False, "no time"
    return mine <= ort, f"{mine / ort:.2f}x"


# --- issue 5 ---------------------------------------------------------------------------------------------
def nodes_vs_simplifiers(result: ModelResult, tool: str) -> tuple[bool, str] | None:
    cell = result.cell(tool)
    peers = [result.cell(t).nodes for t in SIMPLIFIERS if runs(result.cell(t))]
    if cell.unavailable or not peers:
        return None
    best = min(p for p in peers if p is not None)
    return cell.ok and cell.nodes <= best, f"{cell.nodes} vs {best}"


def size_vs_scs(result: ModelResult, tool: str) -> tuple[bool, str] | None:
    cell, scs, original = result.cell(tool), result.cell("scs4onnx"), result.cell(ORIGINAL)
    if cell.unavailable or not cell.ok or original.size is None:
        return None
    ok = cell.size <= original.size and (not runs(scs) or cell.size <= scs.size)
    ref = f"{cell.size / scs.size:.3f}x scs4onnx" if runs(scs) else "scs4onnx output does not run"
    return ok, f"{ref}, {cell.size / original.size:.3f}x input"


def time_vs_onnxsim(result: ModelResult, tool: str) -> tuple[bool, str] | None:
    mine, sim = result.cell(tool).seconds, result.cell("onnxsim").seconds
    if result.cell(tool).unavailable or sim is None or mine is None:
        return None
    return mine <= sim, f"{mine / sim:.2f}x"


def valid(result: ModelResult, tool: str) -> tuple[bool, str] | None:
    cell = result.cell(tool)
    if cell.unavailable:
        return None
    if not cell.ok or cell.max_diff is None:
        return False, cell.error or "not measured"
    return cell.max_diff <= TOLERANCE, ""


def issue4(results: list[ModelResult], tool: str) -> list[Check]:
    """Issue 4's targets for ``tool`` (gsrewrite's optimize / apply column)."""
    return [
        _per_model(results, f"every expected fusion present, max abs diff <= {TOLERANCE:g}",
                   lambda r: complete(r, tool)),
        _per_model(results, "fused-op counts >= the transformers optimizer's", lambda r: counts_vs_ort(r, tool)),
        _per_model(results, "latency (ORT optimizations enabled) <= 1.0x the transformers optimizer's output and "
                   "< 1.0x the original, transformer models", lambda r: latency_vs(r, tool)),
        _per_model(results, "wall time <= 1.0x the transformers optimizer's", lambda r: time_vs_ort(r, tool)),
    ]


def issue5(results: list[ModelResult], tool: str) -> list[Check]:
    """Issue 5's targets for ``tool`` (gsrewrite's simplify column, or optimize when simplify is missing)."""
    return [
        _per_model(results, "node count <= min(onnxsim, onnxslim, onnxoptimizer)",
                   lambda r: nodes_vs_simplifiers(r, tool)),
        _per_model(results, "file size <= scs4onnx shrink's and <= the input's", lambda r: size_vs_scs(r, tool)),
        _per_model(results, "wall time <= onnxsim's", lambda r: time_vs_onnxsim(r, tool)),
        _per_model(results, "wall time without validation (onnxsim's default: no output check) <= onnxsim's",
                   lambda r: time_vs_onnxsim(r, "gsrewrite-simplify-noval")),
        _per_model(results, f"zero validation failures (max abs diff <= {TOLERANCE:g})", lambda r: valid(r, tool)),
    ]
