"""RESULTS.md for compare.py: the target checks, one table per metric (models x tools), failures and notes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _markdown as md
import _targets
from _results import ORIGINAL, Cell, ModelResult
from _tools import TOOLS

FUSED_TABLES = [("attention", "Attention blocks fused (Attention, MultiHeadAttention, GroupQueryAttention, "
                 "PackedAttention)"),
                ("norm", "Norms fused (LayerNormalization, SkipLayerNormalization, SimplifiedLayerNormalization, "
                 "SkipSimplifiedLayerNormalization, RMSNormalization, EmbedLayerNormalization)"),
                ("gelu", "GELUs fused (Gelu, FastGelu, BiasGelu, QuickGelu)"),
                ("bn_left", "BatchNormalization left (0 = every Conv+BN folded)")]

METHOD = """\
How each number is taken (details: docs/benchmarks.md):
- Every tool run is its own subprocess (a peer that aborts costs only its cell); the timed part is the tool's
  load -> optimize -> save call, imports excluded, median of {tool_runs} run(s). gsrewrite runs its CLI
  command in-process (validation on, as users run it). The baseline is the median of `onnx.load` +
  `onnx.save` of the input.
- Fused-op and node counts include subgraphs. File size counts every file the tool wrote (external data too).
- Latency: onnxruntime CPU, 1 intra-op and 1 inter-op thread, the model's sample inputs, {runs} runs per output
  after 5 warm-up runs, spread over 3 sessions (the median of their medians: one session's memory placement
  shifted it by a few percent); all outputs of one model run in interleaved rounds (order shuffled per round)
  in one process, so a load change on the machine hits every column alike. "disabled" = ORT_DISABLE_ALL,
  "enabled" = ORT_ENABLE_ALL.
- Max abs diff: against the reference outputs (`X.outputs.npz`), onnxruntime graph optimizations disabled.
- Cells: `failed` = the tool raised or crashed; `✗` after a number = the tool wrote a model but onnxruntime
  cannot load or run it (`error` where that number needs onnxruntime); `n/a` = tool not available. Reasons are
  listed at the end."""


def _grid(results: list[ModelResult], columns: list[str], value: Callable[[ModelResult, Cell], Any],
          extra: tuple[str, Callable[[ModelResult], Any]] | None = None) -> str:
    headers = ["model", *([extra[0]] if extra else []), *(_label(c) for c in columns)]
    rows = []
    for result in results:
        cells = [_cell(result, result.cell(c), value) for c in columns]
        rows.append([result.name, *([extra[1](result)] if extra else []), *cells])
    return md.table(headers, rows)


def _label(column: str) -> str:
    return "original" if column == ORIGINAL else TOOLS[column].label


def _cell(result: ModelResult, cell: Cell, value: Callable[[ModelResult, Cell], Any]) -> Any:
    if cell.unavailable:
        return "n/a"
    if not cell.ok:
        return "failed"
    shown = value(result, cell)
    if shown is None:
        return "error" if cell.error else None
    return f"{shown} ✗" if cell.error else shown


def _tables(results: list[ModelResult], tools: list[str], runs: int) -> list[str]:
    cols = [ORIGINAL, *tools]
    out = []
    for key, title in FUSED_TABLES:
        expected = ("expected", lambda r, key=key: r.expected.get(key, "—"))
        out += [f"### {title}", "", _grid(results, cols, lambda r, c, key=key: c.fused.get(key, 0), expected), ""]
    out += ["### Nodes", "", _grid(results, cols, lambda r, c: c.nodes), "",
            "### File size", "", _grid(results, cols, lambda r, c: md.size(c.size)), "",
            "### Tool wall time (load -> optimize -> save)", "",
            _grid(results, tools, lambda r, c: md.seconds(c.seconds),
                  ("onnx.load+save", lambda r: md.seconds(r.baseline))), "",
            "### Tool wall time / (onnx.load + onnx.save)", "",
            _grid(results, tools, lambda r, c: md.ratio(c.seconds / r.baseline) if c.seconds else None), ""]
    for mode in ("disabled", "enabled"):
        title = f"onnxruntime CPU latency, graph optimizations {mode.upper()} (1 thread, {runs} runs in 3 sessions)"
        out += [f"### {title}", "",
                _grid(results, cols, lambda r, c, mode=mode: md.seconds(c.latency.get(mode))), ""]
    out += ["### Latency with optimizations enabled, as a ratio to the original's", "",
            _grid(results, tools, _latency_ratio), "",
            "### Max abs diff against the reference outputs", "",
            _grid(results, cols, lambda r, c: md.sci(c.max_diff)), ""]
    return out


def _latency_ratio(result: ModelResult, cell: Cell) -> str | None:
    base, mine = result.cell(ORIGINAL).latency.get("enabled"), cell.latency.get("enabled")
    return md.ratio(mine / base) if base and mine else None


def _notes(results: list[ModelResult], tools: list[str]) -> list[str]:
    lines = []
    for tool in tools:
        reasons = {r.cell(tool).unavailable for r in results}
        if len(reasons) == 1 and "" not in reasons:
            lines.append(f"- {_label(tool)}, every model: {reasons.pop()}")
            continue
        for result in results:
            cell = result.cell(tool)
            text = cell.unavailable or cell.error
            if text:
                lines.append(f"- {result.name} / {_label(tool)}: {text}")
    return lines


def _told(results: list[ModelResult]) -> str:
    rows = [[r.name, r.hints.get("model_type"), r.hints.get("num_heads") or "—", r.hints.get("hidden_size") or "—",
             r.cell("ort-transformers-hinted").note or r.cell("ort-transformers").note or "—"] for r in results]
    return md.table(["model", "model_type", "num_heads (read)", "hidden_size (read)", "transformers optimizer"],
                    rows)


def _gsrewrite_columns(tools: list[str], results: list[ModelResult]) -> tuple[str | None, str | None]:
    fusion = "gsrewrite" if "gsrewrite" in tools else None
    simplify = "gsrewrite-simplify" if "gsrewrite-simplify" in tools and any(
        r.cell("gsrewrite-simplify").ok for r in results) else fusion
    return fusion, simplify


def _checks(results: list[ModelResult], tools: list[str]) -> list[str]:
    fusion, simplify = _gsrewrite_columns(tools, results)
    if fusion is None:
        return ["Target checks need the `gsrewrite` column (run with it in --tools)."]
    command = results[0].cell(fusion).note if results else ""
    lines = [f"### Issue 4 (fusions): `{fusion}` column ({command})", "",
             *(c.line() for c in _targets.issue4(results, fusion)), ""]
    stand_in = "" if simplify == "gsrewrite-simplify" else " (no `gsrewrite simplify` yet: optimize/apply stands in)"
    lines += [f"### Issue 5 (simplify): `{simplify}` column{stand_in}", "",
              *(c.line() for c in _targets.issue5(results, simplify)), ""]
    return lines


def render(results: list[ModelResult], meta: dict[str, Any]) -> str:
    """The whole RESULTS.md; ``meta``: tools, runs, folder, versions, measured (when and where)."""
    tools, runs = meta["tools"], meta["runs"]
    notes = _notes(results, tools)
    lines = ["# gsrewrite vs peer optimizers", "", meta.get("measured") or md.machine_line(), "",
             f"Models: `{meta['folder']}` ({len(results)}). Versions: "
             + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".", "",
             METHOD.format(runs=runs, tool_runs=meta.get("tool_runs", 1)), "", "## Target checks", "",
             *_checks(results, tools),
             "## What the peers were told", "", _told(results), "", "## Results", "", *_tables(results, tools, runs)]
    if notes:
        lines += ["## Failures and unavailable tools", "", *notes, ""]
    return "\n".join(lines)
