"""The report as one self-contained HTML file: no script, no network, no font or stylesheet from elsewhere (a
Content-Security-Policy says so to the browser too), the drawings and charts inline SVG.

Sections: what changed (a table of region groups, each linking to its drawing: the matched subgraph beside its
replacement, the names behind it), why not (:mod:`gsrewrite.report.sections`), what it bought (same). Every
string from the model is escaped by :func:`gsrewrite.report.svg.text`.
"""

from __future__ import annotations

import os
from collections import Counter

from gsrewrite.report import sections
from gsrewrite.report.layout import layout
from gsrewrite.report.record import INPUT, OUTPUT, RegionGroup, ReportRecord, Subgraph
from gsrewrite.report.svg import subgraph, text

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d2733;background:#fafbfc}
header{background:#1f3b57;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px;word-break:break-all}
header p{margin:4px 0;color:#d5e2ef}nav{padding:8px 24px;background:#e9eef3}nav a{margin-right:18px}
main{padding:8px 24px 40px}section{margin-top:18px}h2{border-bottom:2px solid #c9d4df;padding-bottom:3px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d3dbe3;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#eef2f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
.region{background:#fff;border:1px solid #d3dbe3;border-radius:6px;padding:10px 14px;margin:14px 0}
.pair{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}.sbs{display:grid;gap:18px;
align-items:start;max-width:max-content}figure{margin:0}.sbs svg{max-width:100%;height:auto}
figcaption{font-weight:600;margin-bottom:4px}svg text{font:11px sans-serif;fill:#1d2733}
svg .small{font-size:10px}svg g.node text:first-of-type{font-size:12px}.ok{color:#1d7a35;font-weight:600}
.bad{color:#b3261e;font-weight:600}.muted{color:#5b6b7f}code{word-break:break-all}details{margin:6px 0}
li{word-break:break-all}.count{background:#2f6fb3;color:#fff;border-radius:9px;padding:0 8px;font-size:12px}
"""


def render(record: ReportRecord) -> str:
    """The report page."""
    title = f"gsrewrite {record.command}: {os.path.basename(record.model)}"
    body = [_header(record, title), _nav(), "<main>", _changed(record), sections.why_not(record),
            sections.bought(record), "</main>",
            f"<footer class='muted' style='padding:0 24px 20px'>gsrewrite {text(record.version)}</footer>"]
    return ("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{_CSP}\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{text(title)}</title><style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def _header(record: ReportRecord, title: str) -> str:
    lines = [f"<p>model <code>{text(record.model)}</code>"
             + (f" &rarr; <code>{text(record.output)}</code>" if record.output else "") + "</p>"]
    lines += [f"<p>{text(line)}</p>" for line in record.summary]
    return f"<header><h1>{text(title)}</h1>{''.join(lines)}</header>"


def _nav() -> str:
    return ("<nav><a href='#changed'>What changed</a><a href='#why-not'>Why not</a>"
            "<a href='#bought'>What it bought</a></nav>")


def _changed(record: ReportRecord) -> str:
    parts = ["<section id='changed'><h2>What changed</h2>"]
    if not record.groups:
        parts.append("<p>No region was rewritten.</p></section>")
        return "".join(parts)
    total = sum(g.count for g in record.groups)
    parts.append(f"<p>{total} rewrite(s) in {len(record.groups)} group(s) of identical regions (same ops, wiring, "
                 "attributes and boundary shapes): each group is drawn once.</p>")
    parts.append(_summary_table(record.groups))
    parts += [_region(i, group) for i, group in enumerate(record.groups, start=1)]
    parts.append("</section>")
    return "".join(parts)


def _summary_table(groups: list[RegionGroup]) -> str:
    rows = []
    for i, group in enumerate(groups, start=1):
        region = group.region
        rows.append(f"<tr><td class='num'>{i}</td><td><a href='#region-{i}'>{text(region.pattern)}</a></td>"
                    f"<td>{text(group.stage)}</td><td class='num'>&times; {group.count}</td>"
                    f"<td>{_ops(region.before)}</td><td>{_ops(region.after)}</td></tr>")
    return ("<table class='summary'><tr><th>#</th><th>pattern</th><th>stage</th><th>regions</th>"
            f"<th>matched</th><th>replaced by</th></tr>{''.join(rows)}</table>")


def _ops(sub: Subgraph) -> str:
    counts = Counter(sub.ops())
    return text(", ".join(f"{op} x{n}" if n > 1 else op for op, n in counts.items()) or "(nothing)", 300)


def _region(index: int, group: RegionGroup) -> str:
    region = group.region
    variant = f" <span class='muted'>({text(region.variant)})</span>" if region.variant else ""
    before, after = region.before, region.after
    drawn = layout(before), layout(after)
    figures = (f"<figure><figcaption>matched: {len(before.nodes)} node(s)</figcaption>"
               f"{subgraph(drawn[0], 'matched subgraph')}</figure>"
               f"<figure><figcaption>replaced by: {len(after.nodes)} node(s)</figcaption>"
               f"{subgraph(drawn[1], 'replacement')}</figure>")
    # side by side, both drawings shrunk by one factor when the page is narrower than the two
    columns = " ".join(f"minmax(0,{max(d.width, 120):.0f}fr)" for d in drawn)
    return (f"<div class='region' id='region-{index}' data-pattern='{text(region.pattern)}' "
            f"data-count='{group.count}'><h3>{index}. {text(region.pattern)}{variant} "
            f"<span class='count'>&times; {group.count}</span></h3>"
            f"<div class='sbs' style='grid-template-columns:{columns}'>{figures}</div>"
            f"{_boundary(before)}{_instances(group)}</div>")


def _boundary(sub: Subgraph) -> str:
    rows = [f"<tr><td>{kind}</td><td><code>{text(t.name)}</code></td><td>{text(t.shape)}</td>"
            f"<td>{text(t.dtype)}</td></tr>" for kind in (INPUT, OUTPUT) for t in sub.tensors if t.kind == kind]
    if not rows:
        return ""
    return ("<details><summary>boundary tensors (first region)</summary><table><tr><th></th><th>tensor</th>"
            f"<th>shape</th><th>type</th></tr>{''.join(rows)}</table></details>")


def _instances(group: RegionGroup) -> str:
    items = "".join(f"<li><code>{text(names, 4000)}</code></li>" for names in group.instances)
    more = f"<p class='muted'>and {group.more} more region(s) not listed</p>" if group.more else ""
    return (f"<details><summary>the {group.count} region(s): new node &larr; matched nodes</summary>"
            f"<ol>{items}</ol>{more}</details>")


def write(record: ReportRecord, path: str | os.PathLike[str]) -> int:
    """Write the page to ``path`` atomically (a temp file renamed in place); returns the bytes written."""
    from gsrewrite.errors import OutputError
    from gsrewrite.model_io.saving import atomic_files

    data = render(record).encode("utf-8", "replace")
    try:
        with atomic_files() as create:
            create(os.path.abspath(os.fspath(path))).write(data)
    except OSError as exc:
        raise OutputError(f"cannot write '{os.fspath(path)}': {exc.strerror or exc}") from exc
    return len(data)
