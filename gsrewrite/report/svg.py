"""Inline SVG: a subgraph's drawing (:func:`subgraph`) and small bar charts (:func:`paired_bars`, :func:`bars`).

Every string from the model goes through :func:`text` (control characters escaped as the CLI shows them, then
``html.escape`` with quotes: safe in text and in attributes alike); nothing else from the model is written.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from gsrewrite.report.layout import LINE_HEIGHT, PAD, Box, Layout
from gsrewrite.reporting import printable

#: longest text written from the model (a tooltip included), in characters
MAX_TEXT = 400
#: fill colours: a node by its domain, boundary tensors
_FILL = {"node": "#e8f0fb", "contrib": "#fdebd3", "input": "#eef7ee", "output": "#f6eef8"}
_STROKE = "#5b6b7f"
#: chart colours: before, after
BEFORE, AFTER = "#9aa5b1", "#2f6fb3"


def text(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` safe for HTML and SVG, in text and in quoted attributes: one line (control and bidirectional
    characters escaped, :func:`~gsrewrite.reporting.printable`), clipped to ``limit`` characters, escaped."""
    shown = printable(str(value))
    if len(shown) > limit:
        shown = shown[:limit - 1] + "\u2026"
    return html.escape(shown, quote=True)


def subgraph(drawing: Layout, label: str) -> str:
    """The drawing as an ``<svg>`` element (``label``: its accessible name)."""
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='graph' role='img' aria-label='{text(label)}' "
             f"width='{drawing.width:.0f}' height='{drawing.height:.0f}' "
             f"viewBox='0 0 {drawing.width:.0f} {drawing.height:.0f}'>"]
    parts += [_edge(points) for points in drawing.edges]
    parts += [_box(box) for box in drawing.boxes]
    parts.append("</svg>")
    return "".join(parts)


def _edge(points: list[tuple[float, float]]) -> str:
    (x0, y0), rest = points[0], points[1:]
    path = [f"M{x0:.1f},{y0:.1f}"]
    for x1, y1 in rest:
        middle = (y0 + y1) / 2
        path.append(f"C{x0:.1f},{middle:.1f} {x1:.1f},{middle:.1f} {x1:.1f},{y1:.1f}")
        x0, y0 = x1, y1
    tip = f"{x0 - 4:.1f},{y0 - 7:.1f} {x0 + 4:.1f},{y0 - 7:.1f} {x0:.1f},{y0:.1f}"
    return (f"<path d='{' '.join(path)}' fill='none' stroke='{_STROKE}' stroke-width='1.2'/>"
            f"<polygon points='{tip}' fill='{_STROKE}'/>")


def _box(box: Box) -> str:
    title = f"<title>{text(box.title)}</title>"
    if box.kind == "node":
        fill = _FILL[box.tone or "node"]
        shape = (f"<rect x='{box.x:.1f}' y='{box.y:.1f}' width='{box.width:.1f}' height='{box.height:.1f}' "
                 f"rx='5' fill='{fill}' stroke='{_STROKE}'/>")
    else:
        shape = (f"<rect x='{box.x:.1f}' y='{box.y:.1f}' width='{box.width:.1f}' height='{box.height:.1f}' "
                 f"rx='{box.height / 2:.1f}' fill='{_FILL[box.kind]}' stroke='{_STROKE}' stroke-dasharray='3 2'/>")
    lines = []
    for i, line in enumerate(box.lines):
        weight = " font-weight='bold'" if i == 0 and box.kind == "node" else ""
        y = box.y + PAD / 2 + LINE_HEIGHT * (i + 0.78)
        lines.append(f"<text x='{box.center:.1f}' y='{y:.1f}' text-anchor='middle'{weight}>{text(line)}</text>")
    return f"<g class='{box.kind}'>{title}{shape}{''.join(lines)}</g>"


def paired_bars(rows: Sequence[tuple[str, float, float, str, str]], width: int = 560) -> str:
    """Before/after bars, one pair per row, each row scaled to its own larger value: ``(label, before, after,
    before text, after text)``."""
    label_width, bar_height, row_height = 210, 11, 34
    room = width - label_width - 90
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='{width}' "
             f"height='{row_height * len(rows) + 8}' role='img' aria-label='before and after'>"]
    for i, (label, before, after, before_text, after_text) in enumerate(rows):
        top = i * row_height + 4
        scale = room / max(before, after, 1e-30)
        parts.append(f"<text x='0' y='{top + 17}'>{text(label, 34)}</text>")
        for j, (value, shown, colour) in enumerate(((before, before_text, BEFORE), (after, after_text, AFTER))):
            y = top + j * (bar_height + 2)
            length = max(0.0, value) * scale
            parts.append(f"<rect x='{label_width}' y='{y}' width='{length:.1f}' height='{bar_height}' "
                         f"fill='{colour}'/><text x='{label_width + length + 4:.1f}' y='{y + 10}' "
                         f"class='small'>{text(shown, 40)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def bars(rows: Sequence[tuple[str, float, str]], width: int = 560, colour: str = AFTER,
         limit: float | None = None) -> str:
    """One bar per row, scaled to the largest (or to ``limit``, drawn as a line, bars past it clipped):
    ``(label, value, value text)``."""
    label_width, row_height = 210, 18
    room = width - label_width - 90
    top_value = limit or max((v for _, v, _ in rows), default=0.0) or 1.0
    height = row_height * len(rows) + 6
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='{width}' "
             f"height='{height}' role='img' aria-label='chart'>"]
    for i, (label, value, shown) in enumerate(rows):
        y = i * row_height + 3
        length = min(max(0.0, value) / top_value, 1.0) * room
        parts.append(f"<text x='0' y='{y + 12}'>{text(label, 34)}</text><rect x='{label_width}' y='{y}' "
                     f"width='{length:.1f}' height='{row_height - 5}' fill='{colour}'/>"
                     f"<text x='{label_width + length + 4:.1f}' y='{y + 12}' class='small'>{text(shown, 40)}</text>")
    if limit:
        parts.append(f"<line x1='{label_width + room}' y1='0' x2='{label_width + room}' y2='{height}' "
                     "stroke='#b3261e' stroke-dasharray='4 3'/>")
    parts.append("</svg>")
    return "".join(parts)
