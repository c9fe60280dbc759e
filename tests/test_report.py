"""The HTML report through the library: regions grouped by structure, the drawing's layout, the sections, escaping
of every name a model carries, the record as data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_models import HOSTILE, Page, cnn

import gsrewrite
from gsrewrite.pipelines import RewriteOptions
from gsrewrite.report.html import render
from gsrewrite.report.layout import layout
from gsrewrite.report.record import NodeInfo, Subgraph, TensorInfo

ROOT = Path(__file__).resolve().parent.parent
BERT = ROOT / "examples" / "bert-tiny.onnx"
#: what the page may hold: no script, no link out, no form, no embedded document
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "p", "code", "nav", "a",
                "main", "section", "table", "tr", "th", "td", "div", "span", "figure", "figcaption", "svg", "path",
                "polygon", "g", "rect", "text", "line", "details", "summary", "ol", "ul", "li", "b", "footer"}


@pytest.fixture(scope="module")
def bert() -> gsrewrite.RewriteResult:
    return gsrewrite.optimize(str(BERT), rewrite=RewriteOptions(explain=True))


def test_equal_layers_are_one_region_group_counted_per_pattern(bert):
    record = gsrewrite.report_data(bert, model=str(BERT))
    counted: dict[str, int] = {}
    for group in record.groups:
        counted[group.region.pattern] = counted.get(group.region.pattern, 0) + group.count
    assert counted == {k: v for k, v in bert.counts.items() if v}
    mha = next(g for g in record.groups if g.region.pattern == "mha")
    assert mha.count == 2 and len(mha.instances) == 2  # the two layers: one drawing
    assert "MultiHeadAttention" in mha.region.after.ops() and "Softmax" in mha.region.before.ops()
    assert json.loads(json.dumps(record.to_dict()))["groups"][0]["region"]["signature"]


def test_the_page_has_its_sections_and_every_link_resolves(bert):
    page = Page(render(gsrewrite.report_data(bert, model=str(BERT))))
    assert {"changed", "why-not", "bought", "metrics", "validation"} <= page.ids
    assert page.links and all(link in page.ids for link in page.links)
    regions = page.regions()
    assert len(regions) == len(gsrewrite.report_data(bert).groups)
    assert all(f"region-{i}" in page.links for i in range(1, len(regions) + 1))
    assert len(page.svgs) >= 2 * len(regions)  # before and after of each region, then the charts


def test_a_region_draws_the_matched_ops_before_and_the_replacement_after(bert):
    html = render(gsrewrite.report_data(bert))
    page = Page(html)
    first = [r["data-pattern"] for r in page.regions()].index("mha")
    before, after = page.svgs[2 * first], page.svgs[2 * first + 1]
    assert "Softmax" in before and "MultiHeadAttention" not in before
    assert "MultiHeadAttention" in after and "Softmax" not in after
    assert "2 x 16 x 32 float32" in before  # the boundary tensors with their shapes


def test_misses_and_validation_rows(bert):
    record = gsrewrite.report_data(bert)
    kinds = {m.kind for m in record.misses}
    assert {"skipped", "near miss", "no candidate"} <= kinds
    near = next(m for m in record.misses if m.kind == "near miss")
    assert near.reason and near.depth is not None and near.size
    assert [s.name for s in record.validation.size_sets] == [s["name"] for s in bert.validation.sizes]
    metrics = {m.label: m for m in record.metrics}
    assert metrics["nodes"].after < metrics["nodes"].before and metrics["MACs"].before
    assert metrics["activation memory (planned arena)"].after


def test_layout_puts_producers_above_consumers_without_overlaps():
    tensors = (TensorInfo("in", "2 x 8", "float32", "input"), TensorInfo("a", "2 x 8", "float32", "internal"),
               TensorInfo("b", "2 x 8", "float32", "internal"), TensorInfo("w", "8", "float32", "weight"),
               TensorInfo("out", "2 x 8", "float32", "output"))
    nodes = (NodeInfo("Relu", "", "r", (), (0,), (1,)), NodeInfo("Mul", "", "m", (), (0, 3), (2,)),
             NodeInfo("Add", "", "add", (), (1, 2), (4,)))
    drawing = layout(Subgraph(nodes, tensors))
    assert [b.kind for b in drawing.boxes].count("node") == 3 and len(drawing.edges) == 5
    assert all(points[0][1] < points[-1][1] for points in drawing.edges)  # every edge runs downwards
    for a in drawing.boxes:
        for b in drawing.boxes:
            if a is not b and a.layer == b.layer:
                assert a.x + a.width <= b.x or b.x + b.width <= a.x
    assert any("W 8 float32" in line for b in drawing.boxes for line in b.lines)  # weights inside their node


def test_every_name_from_the_model_is_escaped(tmp_path):
    result = gsrewrite.optimize(cnn(len(HOSTILE), HOSTILE), rewrite=RewriteOptions(explain=True))
    assert result.pass_records and result.passes.get("fuse-conv-bn") == len(HOSTILE)
    path = tmp_path / "r.html"
    gsrewrite.write_report(result, path, model="<b>m</b>.onnx")
    html = path.read_text(encoding="utf-8")
    page = Page(html)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    for _tag, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs)
        assert not any("javascript:" in (value or "") for value in attrs.values())
    assert "\x1b" not in html and "\u202e" not in html and "\x07" not in html
    assert "x" * 600 not in html and len(html) < 200_000  # long names clipped
    assert "名前" in html and "\\u202e" in html  # non-ASCII kept, controls shown escaped


def test_a_report_of_nothing_changed_and_of_a_simplify(tmp_path):
    model = cnn(2)
    simplified = gsrewrite.simplify(model)
    record = gsrewrite.report_data(simplified)
    assert record.command == "simplify" and [g.region.pattern for g in record.groups] == ["conv-bn", "conv-bn"]
    assert [g.stage for g in record.groups] == ["cleanup", "cleanup"]
    unchanged = gsrewrite.apply(model, ["gelu"])
    html = render(gsrewrite.report_data(unchanged))
    assert "No region was rewritten" in html


def test_many_equal_layers_are_one_drawing_and_a_capped_list():
    """The report grows with the distinct regions, not the model: 80 blocks, two drawings, the names capped."""
    result = gsrewrite.simplify(cnn(80), validate=False)
    record = gsrewrite.report_data(result)
    assert [g.count for g in record.groups] == [1, 79]
    big = record.groups[1]
    assert big.more and len(big.instances) + big.more == 79 and len(big.instances) < 79
    html = render(record)
    assert len(html) < 120_000 and html.count("<svg") == 4 + html.count("class='chart'")
