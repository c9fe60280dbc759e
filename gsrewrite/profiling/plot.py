"""``profile --plot FILE``: MACs and activation memory by op type, and the top N nodes by MACs.

``.html`` is a self-contained page with inline SVG bar charts (no dependency); ``.png`` / ``.svg`` are drawn
with matplotlib (the ``plot`` extra). Symbolic counts are drawn at the sizes bound (the title says which).
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence

from gsrewrite.errors import UsageError
from gsrewrite.profiling.costs import Profile, _rank_value

FORMATS = (".html", ".png", ".svg")


def render(profile: Profile, path: str, top: int = 15) -> bytes:
    """The plot's bytes for ``path``'s format."""
    lower = path.lower()
    by_type = profile.by_op_type()
    macs = [(k, _rank_value(v.macs)) for k, v in by_type.items()]
    memory = sorted(((k, _rank_value(v.activation_bytes)) for k, v in by_type.items()), key=lambda kv: -kv[1])
    nodes = [(f"{n.name or '?'} ({n.op_key})", _rank_value(n.macs)) for n in profile.top(top)]
    title = _title(profile)
    charts = [("MACs by op type", macs[:top]), ("Activation bytes by op type", memory[:top]),
              (f"Top {top} nodes by MACs", nodes)]
    if lower.endswith(".html"):
        return _html(title, charts).encode()
    if lower.endswith((".png", ".svg")):
        return _matplotlib(title, charts, "png" if lower.endswith(".png") else "svg")
    raise UsageError(f"--plot {path}: the file name must end in {', '.join(FORMATS)}")


def _title(profile: Profile) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in sorted(profile.bindings.items()))
    free = [s for s in profile.symbols() if s not in profile.bindings]
    text = "gsrewrite profile" + (f" at {sizes}" if sizes else "")
    if free:
        text += f" (symbols ranked at 128: {', '.join(free)})"
    return text


def _html(title: str, charts: Sequence[tuple[str, list[tuple[str, float]]]]) -> str:
    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}text{font-size:12px}</style>",
             f"<h1>{html.escape(title)}</h1>"]
    for name, rows in charts:
        parts.append(f"<h2>{html.escape(name)}</h2>")
        parts.append(_svg_bars(rows))
    return "\n".join(parts)


def _svg_bars(rows: list[tuple[str, float]]) -> str:
    width, label_width, bar_height = 900, 320, 18
    top = max((v for _, v in rows), default=0.0) or 1.0
    height = bar_height * len(rows) + 10
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}'>"]
    for i, (label, value) in enumerate(rows):
        y = i * bar_height + 4
        length = max(0.0, value) / top * (width - label_width - 110)
        out.append(f"<text x='0' y='{y + 12}'>{html.escape(label[:48])}</text>")
        out.append(f"<rect x='{label_width}' y='{y}' width='{length:.1f}' height='{bar_height - 4}' "
                   "fill='#4c78a8'/>")
        out.append(f"<text x='{label_width + length + 4:.1f}' y='{y + 12}'>{_short(value)}</text>")
    out.append("</svg>")
    return "".join(out)


def _short(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


def _matplotlib(title: str, charts: Sequence[tuple[str, list[tuple[str, float]]]], fmt: str) -> bytes:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot FILE.png/.svg needs matplotlib: pip install 'gsrewrite[plot]' "
                         "(or write FILE.html, which needs nothing)") from None
    fig, axes = plt.subplots(len(charts), 1, figsize=(10, 4 * len(charts)))
    for ax, (name, rows) in zip(axes, charts, strict=True):
        labels = [label[:40] for label, _ in rows][::-1]
        ax.barh(labels, [v for _, v in rows][::-1], color="#4c78a8")
        ax.set_title(name)
    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt)
    plt.close(fig)
    return buffer.getvalue()
