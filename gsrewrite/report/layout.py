"""A layered drawing of a small subgraph (5-60 nodes), computed in Python: longest-path layers, dummy points on
long edges, barycentric ordering (sweeps down and up), then coordinates pulled towards the neighbours' centres.

The region's input tensors are the top row, its output tensors sit below their producers; constants are written
inside the node that reads them (a weight is a line of text, not a vertex). Sizes come from an estimate of the
text's width (:data:`CHAR_WIDTH`), so nothing here needs a browser or a font.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from gsrewrite.report.record import INPUT, OUTPUT, WEIGHT, NodeInfo, Subgraph, TensorInfo

#: estimated width of one character (px) at the drawing's font sizes, and the line height
CHAR_WIDTH, LINE_HEIGHT = 6.6, 14
#: padding inside a box, gaps between boxes and between layers, the margin around the drawing
PAD, GAP_X, GAP_Y, MARGIN = 8, 18, 30, 10
#: attribute and weight lines shown in a node's box, their length, and the length of a tensor's lines
MAX_LINES, LINE_CHARS, TENSOR_CHARS = 3, 30, 22
#: sweeps of barycentric ordering and of coordinate pulling
SWEEPS = 6


@dataclass
class Box:
    """A vertex: a node (``node``), a boundary tensor (``input``/``output``) or a bend of a long edge (``dummy``)."""

    kind: str
    lines: list[str]
    title: str = ""
    #: ``contrib``: a node of another domain than ONNX's (drawn in another colour)
    tone: str = ""
    width: float = 0.0
    height: float = 0.0
    layer: int = 0
    x: float = 0.0
    y: float = 0.0

    @property
    def center(self) -> float:
        return self.x + self.width / 2


@dataclass
class Layout:
    boxes: list[Box]
    #: each edge's points, from the bottom of its source to the top of its target
    edges: list[list[tuple[float, float]]] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0


def layout(sub: Subgraph) -> Layout:
    """Boxes and edge paths for ``sub``."""
    boxes, edges = _vertices(sub)
    _layers(boxes, edges)
    chains = _split_long_edges(boxes, edges)
    rows = _order(boxes, chains)
    _coordinates(boxes, rows, chains)
    return _finish(boxes, rows, chains)


def _vertices(sub: Subgraph) -> tuple[list[Box], list[tuple[int, int]]]:
    boxes: list[Box] = []
    producer: dict[int, int] = {}
    for index, tensor in enumerate(sub.tensors):
        if tensor.kind == INPUT:
            producer[index] = len(boxes)
            boxes.append(_tensor_box(tensor, INPUT))
    first_node = len(boxes)
    for node in sub.nodes:
        for out in node.outputs:
            if out >= 0:
                producer[out] = len(boxes)
        boxes.append(_node_box(node, sub.tensors))
    edges = []
    for offset, node in enumerate(sub.nodes):
        for index in dict.fromkeys(i for i in node.inputs if i >= 0 and sub.tensors[i].kind != WEIGHT):
            if index in producer:
                edges.append((producer[index], first_node + offset))
    for index, tensor in enumerate(sub.tensors):
        if tensor.kind == OUTPUT and index in producer:
            boxes.append(_tensor_box(tensor, OUTPUT))
            edges.append((producer[index], len(boxes) - 1))
    return boxes, edges


def _tensor_box(tensor: TensorInfo, kind: str) -> Box:
    lines = [_tail(tensor.name, TENSOR_CHARS), _clip(f"{tensor.shape} {tensor.dtype}".strip(), LINE_CHARS)]
    return _sized(Box(kind, lines, f"{tensor.name}: {tensor.shape} {tensor.dtype}".strip()))


def _node_box(node: NodeInfo, tensors: tuple[TensorInfo, ...]) -> Box:
    attrs = [f"{k}={v}" for k, v in node.attrs]
    weights = [_weight_text(tensors[i]) for i in node.inputs if i >= 0 and tensors[i].kind == WEIGHT]
    extra = attrs + weights
    lines = [node.op] + [_clip(t, LINE_CHARS) for t in extra[:MAX_LINES]]
    if len(extra) > MAX_LINES:
        lines[-1] = _clip(f"{lines[-1]} (+{len(extra) - MAX_LINES})", LINE_CHARS + 6)
    domain = f" ({node.domain})" if node.domain else ""
    title = "\n".join([f"{node.name or '(no name)'}: {node.op}{domain}", *attrs,
                       *(f"{tensors[i].name}: {_weight_text(tensors[i])}" for i in node.inputs
                         if i >= 0 and tensors[i].kind == WEIGHT)])
    return _sized(Box("node", lines, title, tone="contrib" if node.domain not in ("", "ai.onnx") else ""))


def _weight_text(tensor: TensorInfo) -> str:
    if tensor.value is not None:
        return f"= {tensor.value}"
    return f"W {tensor.shape} {tensor.dtype}".strip()


def _tail(name: str, limit: int) -> str:
    """The end of a tensor's name (exporters put the distinctive part last: ``.../query/Add_output_0``)."""
    return name if len(name) <= limit else "\u2026" + name[len(name) - limit + 1:]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _sized(box: Box) -> Box:
    box.width = max(len(line) for line in box.lines) * CHAR_WIDTH + 2 * PAD
    box.height = len(box.lines) * LINE_HEIGHT + PAD
    return box


def _layers(boxes: list[Box], edges: list[tuple[int, int]]) -> None:
    """Longest path from the sources (edges are acyclic: a match is a DAG)."""
    preds: dict[int, list[int]] = {}
    for u, v in edges:
        preds.setdefault(v, []).append(u)
    done: dict[int, int] = {}
    for start in range(len(boxes)):
        stack = [start]
        while stack:
            v = stack[-1]
            waiting = [u for u in preds.get(v, ()) if u not in done and u not in stack]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            done[v] = 1 + max((done[u] for u in preds.get(v, ()) if u in done), default=-1)
    for index, box in enumerate(boxes):
        box.layer = done[index]


def _split_long_edges(boxes: list[Box], edges: list[tuple[int, int]]) -> list[list[int]]:
    """Each edge as a chain of vertices, with a dummy on every layer it crosses."""
    chains = []
    for u, v in edges:
        chain = [u]
        for layer in range(boxes[u].layer + 1, boxes[v].layer):
            boxes.append(Box("dummy", [], layer=layer, width=4, height=LINE_HEIGHT))
            chain.append(len(boxes) - 1)
        chains.append([*chain, v])
    return chains


def _order(boxes: list[Box], chains: list[list[int]]) -> list[list[int]]:
    rows: list[list[int]] = [[] for _ in range(max(b.layer for b in boxes) + 1)] if boxes else []
    for index, box in enumerate(boxes):
        rows[box.layer].append(index)
    up: dict[int, list[int]] = {}
    down: dict[int, list[int]] = {}
    for chain in chains:
        for a, b in itertools.pairwise(chain):
            up.setdefault(b, []).append(a)
            down.setdefault(a, []).append(b)
    for _ in range(SWEEPS):
        for layer in range(1, len(rows)):
            _sort_by_barycenter(rows[layer], rows[layer - 1], up)
        for layer in range(len(rows) - 2, -1, -1):
            _sort_by_barycenter(rows[layer], rows[layer + 1], down)
    return rows


def _sort_by_barycenter(row: list[int], fixed: list[int], neighbours: dict[int, list[int]]) -> None:
    position = {v: i for i, v in enumerate(fixed)}

    def key(item: tuple[int, int]) -> float:
        index, v = item
        near = [position[u] for u in neighbours.get(v, ()) if u in position]
        return sum(near) / len(near) if near else float(index)

    row[:] = [v for _, v in sorted(enumerate(row), key=key)]


def _coordinates(boxes: list[Box], rows: list[list[int]], chains: list[list[int]]) -> None:
    y = float(MARGIN)
    for row in rows:
        height = max((boxes[v].height for v in row), default=0.0)
        x = float(MARGIN)
        for v in row:
            boxes[v].x, boxes[v].y = x, y + (height - boxes[v].height) / 2
            x += boxes[v].width + GAP_X
        y += height + GAP_Y
    neighbours: dict[int, list[int]] = {}
    for chain in chains:
        for a, b in itertools.pairwise(chain):
            neighbours.setdefault(a, []).append(b)
            neighbours.setdefault(b, []).append(a)
    for _ in range(SWEEPS):
        for row in [*rows, *reversed(rows)]:
            _pull(boxes, row, neighbours)


def _pull(boxes: list[Box], row: list[int], neighbours: dict[int, list[int]]) -> None:
    """Move each box of ``row`` towards the mean centre of its neighbours, keeping the order and the gaps."""
    for v in row:
        near = neighbours.get(v)
        if near:
            boxes[v].x = sum(boxes[u].center for u in near) / len(near) - boxes[v].width / 2
    for left, right in itertools.pairwise(row):
        least = boxes[left].x + boxes[left].width + GAP_X
        if boxes[right].x < least:
            boxes[right].x = least


def _finish(boxes: list[Box], rows: list[list[int]], chains: list[list[int]]) -> Layout:
    shift = MARGIN - min((b.x for b in boxes), default=0.0)
    for box in boxes:
        box.x += shift
    edges = []
    for chain in chains:
        points = [(boxes[chain[0]].center, boxes[chain[0]].y + boxes[chain[0]].height)]
        points += [(boxes[v].center, boxes[v].y + boxes[v].height / 2) for v in chain[1:-1]]
        points.append((boxes[chain[-1]].center, boxes[chain[-1]].y))
        edges.append(points)
    width = max((b.x + b.width for b in boxes), default=0.0) + MARGIN
    height = max((b.y + b.height for b in boxes), default=0.0) + MARGIN
    return Layout([b for b in boxes if b.kind != "dummy"], edges, width, height)
