"""Models and HTML readers the report tests share: a small CNN (Conv + BatchNormalization + Relu blocks) made with
onnx.helper, a model whose names are hostile, and a parser that lists a page's tags, attributes and links."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: names a model may carry (markup, quotes, entities, controls, bidirectional override, very long, non-ASCII)
HOSTILE = ["<script>alert(1)</script>", "\"'><img src=x onerror=alert(1)>", "a&amp;b&lt;", "esc\x1b[31mred\x07",
           "rtl\u202eexe.onnx", "x" * 5000, "名前/ノード", "</svg><svg onload=alert(1)>", "javascript:alert(1)"]


def cnn(blocks: int = 4, names: list[str] | None = None) -> onnx.ModelProto:
    """``blocks`` x (Conv 3x3 -> BatchNormalization -> Relu), 3 then 8 channels, batch symbolic; ``names``: the
    nodes' and tensors' names (cycled), default plain ones."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    name = (lambda i, kind: f"{names[i % len(names)]}{kind}{i}") if names else (lambda i, kind: f"{kind}{i}")
    prev, channels = "x", 3
    for i in range(blocks):
        w, c, n, r = name(i, "w"), name(i, "conv"), name(i, "bn"), name(i, "relu")
        stats = [(0.2 * rng.standard_normal((8, channels, 3, 3))).astype(np.float32), rng.random(8) + 0.5,
                 rng.standard_normal(8), rng.standard_normal(8), rng.random(8) + 0.5]
        keys = [w, f"s{i}", f"b{i}", f"m{i}", f"v{i}"]
        inits += [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in zip(keys, stats, strict=True)]
        nodes += [helper.make_node("Conv", [prev, w], [c + "_out"], name=c, pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [c + "_out", *keys[1:]], [n + "_out"], name=n, epsilon=1e-5),
                  helper.make_node("Relu", [n + "_out"], [r + "_out"], name=r)]
        prev, channels = r + "_out", 8
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save_cnn(folder: Path, blocks: int = 4) -> Path:
    path = folder / "cnn.onnx"
    onnx.save(cnn(blocks), path)
    return path


class Page(HTMLParser):
    """Every tag with its attributes, the ids, the local links, the text of ``<svg>`` elements in order."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.svgs: list[str] = []
        self._svg_depth = 0
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.tags.append((tag, values))
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "a" and (values.get("href") or "").startswith("#"):
            self.links.append((values["href"] or "")[1:])
        if tag == "svg":
            if self._svg_depth == 0:
                self.svgs.append("")
            self._svg_depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._svg_depth:
            self.svgs[-1] += data + "\n"

    def regions(self) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.tags if tag == "div" and "region" in (attrs.get("class") or "")]
