"""Regions as the rewrite engine sees them: the matched nodes taken down before they are replaced, the replacement
after (:class:`Regions`, one per rewrite pass run), and the rewrites grouped by structure for the report.

A snapshot keeps names, shapes, types and attributes as text, never a weight: a constant is its name, shape and
type (and its value when it has at most :data:`MAX_VALUE_ELEMENTS` elements). Regions of equal structure share
one snapshot (:meth:`Regions.region`), so a model with 30 equal layers keeps one drawing, not 30.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.report.record import INPUT, INTERNAL, OUTPUT, WEIGHT, NodeInfo, Region, RegionGroup, Subgraph, TensorInfo

#: constants of at most this many elements show their value
MAX_VALUE_ELEMENTS = 4
#: list attributes show this many items, then the count
MAX_LIST_ITEMS = 6
#: attribute text kept (characters)
MAX_ATTR_TEXT = 60
#: node names listed per region group (every instance is counted), and the characters kept of each
MAX_NAMES, MAX_NAME = 200, 160


def snapshot(nodes: Sequence[gs.Node], graph_outputs: frozenset[int] = frozenset()) -> Subgraph:
    """``nodes`` as data: each node's op, name, attributes, and the tensors at the region's boundary (``input``:
    produced outside, ``output``: read outside or a graph output; ``graph_outputs``: ids of the graph's output
    tensors), constants as ``weight``."""
    inside = {id(n) for n in nodes}
    index: dict[int, int] = {}
    tensors: list[TensorInfo] = []

    def place(tensor: gs.Tensor) -> int:
        if not tensor.name:
            return -1
        key = id(tensor)
        if key not in index:
            index[key] = len(tensors)
            tensors.append(_tensor(tensor, _kind(tensor, inside, graph_outputs)))
        return index[key]

    infos = [NodeInfo(n.op, n.domain or "", n.name or "", _attrs(n.attrs), tuple(place(t) for t in n.inputs),
                      tuple(place(t) for t in n.outputs)) for n in nodes]
    return Subgraph(tuple(infos), tuple(tensors))


def _kind(tensor: gs.Tensor, inside: set[int], graph_outputs: frozenset[int]) -> str:
    if isinstance(tensor, gs.Constant):
        return WEIGHT
    if not any(id(p) in inside for p in tensor.inputs):
        return INPUT
    if id(tensor) in graph_outputs or any(id(c) not in inside for c in tensor.outputs):
        return OUTPUT
    return INTERNAL


def _tensor(tensor: gs.Tensor, kind: str) -> TensorInfo:
    shape = getattr(tensor, "shape", None)
    value = _small_value(tensor) if kind == WEIGHT else None
    return TensorInfo(tensor.name, shape_text(shape), _dtype(tensor), kind, value)


def shape_text(shape: Any) -> str:
    """``batch x 128 x 768``; ``scalar``; ``?`` when unknown (a dim unknown: ``?`` in its place)."""
    if shape is None:
        return "?"
    dims = ["?" if d is None or (isinstance(d, str) and not d) else str(d) for d in shape]
    return " x ".join(dims) if dims else "scalar"


def _dtype(tensor: gs.Tensor) -> str:
    dtype = getattr(tensor, "dtype", None)
    if dtype is None:
        return ""
    try:
        return _dtype_name(dtype)
    except TypeError:  # unhashable: not a dtype numpy knows either
        return str(dtype)


@functools.lru_cache(maxsize=256)
def _dtype_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def _small_value(tensor: gs.Constant) -> str | None:
    shape = tensor.shape
    if shape is None or any(not isinstance(d, int) for d in shape) or math.prod(shape) > MAX_VALUE_ELEMENTS:
        return None
    try:
        values = np.asarray(tensor.values).reshape(-1)
    except Exception:  # a payload that cannot be read here: shown without its value
        return None
    return _clip(", ".join(_scalar(v) for v in values.tolist()))


def _attrs(attrs: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((str(name), attr_text(value)) for name, value in attrs.items())


def attr_text(value: Any) -> str:
    """An attribute's value as short text: numbers, strings (clipped), lists (the first items and the count),
    tensors by shape and type, subgraphs by name."""
    if isinstance(value, gs.Graph):
        return f"graph {_clip(value.name or '')}".strip()
    if isinstance(value, (gs.Constant, np.ndarray)):
        array = value if isinstance(value, np.ndarray) else None
        shape = array.shape if array is not None else value.shape
        return f"tensor {shape_text(shape)} {_dtype(value) if array is None else array.dtype.name}"
    if isinstance(value, (list, tuple)):
        items = [attr_text(v) for v in value[:MAX_LIST_ITEMS]]
        more = f", ... ({len(value)})" if len(value) > MAX_LIST_ITEMS else ""
        return _clip("[" + ", ".join(items) + more + "]")
    return _clip(_scalar(value))


def _scalar(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ATTR_TEXT else text[:MAX_ATTR_TEXT - 3] + "..."


def signature(pattern: str, variant: str, before: Subgraph, after: Subgraph) -> str:
    """The structure of a rewrite without its names: ops, wiring, attributes, tensor kinds, shapes and types."""
    def shape_of(sub: Subgraph) -> list[Any]:
        return [[(n.op, n.domain, n.attrs, n.inputs, n.outputs) for n in sub.nodes],
                [(t.kind, t.shape, t.dtype, t.value) for t in sub.tensors]]

    text = repr((pattern, variant, shape_of(before), shape_of(after)))
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Regions:
    """The regions of one rewrite pass run, equal structures shared: ``before(nodes)`` ahead of the replacement,
    ``region(...)`` with the replacement's nodes."""

    def __init__(self, graph: gs.Graph) -> None:
        self._outputs = frozenset(id(t) for t in graph.outputs)
        self._seen: dict[str, Region] = {}

    def before(self, nodes: Sequence[gs.Node]) -> Subgraph:
        return snapshot(nodes, self._outputs)

    def region(self, pattern: str, variant: str, before: Subgraph, added: Sequence[gs.Node]) -> Region:
        after = snapshot(added, self._outputs)
        key = signature(pattern, variant, before, after)
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = Region(pattern, variant, key, before, after)
        return found


def group_records(records: Iterable[Any], stage: str = "fusion") -> list[RegionGroup]:
    """Match records (``MatchRecord``: ``region``, ``replaced``, ``added``) grouped by their region's signature,
    in order of first appearance; records without a region are left out."""
    groups: dict[str, RegionGroup] = {}
    names: dict[str, int] = {}
    for record in records:
        region = getattr(record, "region", None)
        if region is None:
            continue
        group = groups.get(region.signature)
        if group is None:
            group = groups[region.signature] = RegionGroup(region, stage=stage)
            names[region.signature] = 0
        group.count += 1
        listed = len(record.added) + len(record.replaced)
        if group.instances and names[region.signature] + listed > MAX_NAMES:
            group.more += 1
            continue
        group.instances.append(_instance(record.added, record.replaced))
        names[region.signature] += listed
    return list(groups.values())


def _instance(added: Sequence[str], replaced: Sequence[str]) -> str:
    """``new <- matched, matched, ...`` (at most MAX_NAMES names, each clipped to MAX_NAME characters)."""
    more = f", ... ({len(replaced)} nodes)" if len(replaced) > MAX_NAMES else ""
    return (f"{', '.join(_name(n) for n in added[:MAX_NAMES])} <- "
            f"{', '.join(_name(n) for n in replaced[:MAX_NAMES])}{more}")


def _name(name: str) -> str:
    return name if len(name) <= MAX_NAME else name[:MAX_NAME - 3] + "..."
