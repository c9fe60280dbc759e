"""The report's "Why not" and "What it bought" sections (HTML with inline SVG charts; model strings escaped by
:func:`gsrewrite.report.svg.text`)."""

from __future__ import annotations

from collections.abc import Sequence

from gsrewrite.report.record import Compression, Metric, Miss, OutputRow, ReportRecord, Validation
from gsrewrite.report.svg import bars, paired_bars, text
from gsrewrite.reporting import size_text

#: the kinds of misses, in the order shown, with their headings
_KINDS = (("dropped", "Dropped by validation (their rewrites changed the outputs, or onnxruntime refused them)"),
          ("skipped", "Skipped by the target, the opset or the device policy"),
          ("near miss", "Did not match: the deepest near miss and where it stopped"),
          ("not folded", "Not folded (size or work limits)"),
          ("left uncompressed", "Left uncompressed to meet the tolerance"))
#: op types drawn in the op-count chart (most changed first)
MAX_OP_BARS = 16


def why_not(record: ReportRecord) -> str:
    parts = ["<section id='why-not'><h2>Why not</h2>"]
    by_kind: dict[str, list[Miss]] = {}
    for miss in record.misses:
        by_kind.setdefault(miss.kind, []).append(miss)
    for kind, heading in _KINDS:
        if by_kind.get(kind):
            parts.append(f"<h3 id='why-{kind.replace(' ', '-')}'>{heading}</h3>{_miss_table(by_kind[kind])}")
    absent = by_kind.get("no candidate", [])
    if absent:
        names = ", ".join(text(m.name) for m in absent)
        parts.append(f"<h3 id='why-no-candidate'>No candidate in the graph ({len(absent)})</h3>"
                     f"<p class='muted'>The graph has no node of the op these patterns start from: {names}</p>")
    if not record.misses:
        parts.append("<p>Nothing was dropped or skipped, and every selected pattern fired.</p>")
    parts += [f"<p class='muted'>{text(note)}</p>" for note in record.notes if note.startswith("near misses")]
    parts.append("</section>")
    return "".join(parts)


def _miss_table(misses: Sequence[Miss]) -> str:
    rows = []
    for miss in misses:
        depth = ""
        if miss.depth is not None and miss.size:
            share = miss.depth / miss.size
            depth = (f"<svg width='60' height='10' role='img' aria-label='{miss.depth} of {miss.size}'>"
                     f"<rect width='60' height='10' fill='#e2e7ec'/><rect width='{60 * share:.0f}' height='10' "
                     f"fill='#2f6fb3'/></svg> {miss.depth}/{miss.size}")
        rows.append(f"<tr><td><code>{text(miss.name)}</code></td><td>{depth}</td><td>{text(miss.reason, 1200)}</td>"
                    "</tr>")
    return f"<table><tr><th>name</th><th>matched</th><th>why</th></tr>{''.join(rows)}</table>"


def bought(record: ReportRecord) -> str:
    parts = ["<section id='bought'><h2>What it bought</h2>"]
    if record.sizes:
        parts.append(f"<p class='muted'>MACs and activation memory at {text(record.sizes)}.</p>")
    parts.append(_metrics(record.metrics))
    parts.append(_ops(record.ops))
    if record.validation is not None:
        parts.append(_validation(record.validation))
    if record.compression is not None:
        parts.append(_compression(record.compression))
    if record.latency:
        rows = [(lat.label, lat.ms, f"{lat.ms:.3f} ms {lat.note}".strip()) for lat in record.latency]
        parts.append(f"<h3 id='latency'>Latency (onnxruntime)</h3>{bars(rows)}")
    parts += [f"<p class='muted'>{text(note)}</p>" for note in record.notes if not note.startswith("near misses")]
    parts.append("</section>")
    return "".join(parts)


def value_text(value: float | None, unit: str) -> str:
    if value is None:
        return "?"
    if unit == "bytes":
        return size_text(value)
    if unit == "macs":
        for suffix, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {suffix}"
    return f"{value:,.0f}"


def _change(metric: Metric) -> str:
    if metric.before is None or metric.after is None:
        return ""
    if metric.before:
        return f"{metric.after / metric.before:.3f}x"
    return f"{metric.after - metric.before:+,.0f}"


def _metrics(metrics: Sequence[Metric]) -> str:
    if not metrics:
        return ""
    rows = "".join(f"<tr><td>{text(m.label)}</td><td class='num'>{value_text(m.before, m.unit)}</td>"
                   f"<td class='num'>{value_text(m.after, m.unit)}</td><td class='num'>{_change(m)}</td>"
                   f"<td class='muted'>{text(m.note)}</td></tr>" for m in metrics)
    chart = paired_bars([(m.label, m.before, m.after, value_text(m.before, m.unit), value_text(m.after, m.unit))
                         for m in metrics if m.before is not None and m.after is not None and (m.before or m.after)])
    return (f"<h3 id='metrics'>Before / after</h3><div class='pair'><table><tr><th></th><th>before</th>"
            f"<th>after</th><th>ratio</th><th></th></tr>{rows}</table>{chart}</div>")


def _ops(ops: Sequence[Metric]) -> str:
    if not ops:
        return ""
    rows = "".join(f"<tr><td>{text(m.label)}</td><td class='num'>{value_text(m.before, 'count')}</td>"
                   f"<td class='num'>{value_text(m.after, 'count')}</td>"
                   f"<td class='num'>{(m.after or 0) - (m.before or 0):+,.0f}</td></tr>" for m in ops)
    changed = sorted(ops, key=lambda m: -abs((m.after or 0) - (m.before or 0)))[:MAX_OP_BARS]
    chart = paired_bars([(m.label, m.before or 0, m.after or 0, value_text(m.before, "count"),
                          value_text(m.after, "count")) for m in changed])
    return (f"<h3 id='ops'>Op types that changed</h3><div class='pair'><table><tr><th>op</th><th>before</th>"
            f"<th>after</th><th>change</th></tr>{rows}</table>{chart}</div>")


def _verdict(ok: bool) -> str:
    return "<span class='ok'>ok</span>" if ok else "<span class='bad'>FAILED</span>"


def _validation(validation: Validation) -> str:
    rows = "".join(f"<tr><td>{text(s.name)}</td><td>{text(s.shapes, 600)}</td><td><code>{text(s.worst_output or '')}"
                   f"</code></td><td class='num'>{_number(s.max_abs)}</td><td class='num'>{_number(s.cosine, 6)}</td>"
                   f"<td>{_verdict(s.ok)}{text(' ' + ', '.join(s.failed)) if s.failed else ''}</td></tr>"
                   for s in validation.size_sets)
    sets = (f"<table><tr><th>size set</th><th>input shapes</th><th>worst output</th><th>max abs</th><th>cosine</th>"
            f"<th></th></tr>{rows}</table>") if rows else ""
    chart = ""
    known = [s for s in validation.size_sets if s.max_abs is not None]
    if known and validation.atol:
        chart = ("<p class='muted'>Worst max abs error per size set, as a share of atol (the dashed line):</p>"
                 + bars([(s.name, (s.max_abs or 0.0) / validation.atol, f"{(s.max_abs or 0.0) / validation.atol:.3g}"
                          " x atol") for s in known], colour="#4c9a5b", limit=1.0))
    runs = f", {validation.runs} input set(s) per size" if validation.runs > 1 else ""
    return (f"<h3 id='validation'>Validation against the original (onnxruntime)</h3><p>{_verdict(validation.ok)} "
            f"{text(validation.verdict, 2000)}</p><p>Rule: <b>{text(validation.rule)}</b> "
            f"<span class='muted'>({text(validation.source)}{runs})</span></p>{sets}{chart}"
            f"{_outputs(validation.outputs)}")


def _outputs(outputs: Sequence[OutputRow]) -> str:
    if not outputs:
        return ""
    rows = "".join(f"<tr><td><code>{text(o.name)}</code></td><td>{text(o.text, 600)}</td><td>{_verdict(o.ok)}"
                   f"{text(' ' + ', '.join(o.failed)) if o.failed else ''}</td></tr>" for o in outputs)
    return f"<table><tr><th>output</th><th>comparison</th><th></th></tr>{rows}</table>"


def _compression(compression: Compression) -> str:
    notes = "".join(f"<li>{text(note, 1000)}</li>" for note in compression.notes)
    graph = f"<p>Output graph: {text(compression.graph, 1000)}</p>" if compression.graph else ""
    return (f"<h3 id='compression'>Compression: {text(compression.strategy)}</h3><p>{_verdict(compression.ok)} "
            f"tolerance <b>{text(compression.rule)}</b> <span class='muted'>({text(compression.source)})</span></p>"
            f"{graph}{_outputs(compression.outputs)}" + (f"<ul>{notes}</ul>" if notes else ""))


def _number(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}g}"
