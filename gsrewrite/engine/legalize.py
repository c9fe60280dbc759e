"""Legalization: the inverse of canonicalization, run once before a graph is exported.

Operands that canonicalization (or a replacement template) wrote as attributes go back to inputs where the
model's opset requires it (and vice versa for Clip), and attributes equal to their schema default are
dropped again, so the saved model uses the spelling its opset defines.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.engine import opforms
from gsrewrite.graph.core import NameSource, constant_values


def legalize(graph: gs.Graph) -> gs.Graph:
    """Make every top-level standard node use the operand spelling of ``graph.opset``."""
    names = NameSource(graph)
    opset = graph.opset
    for node in graph.nodes:
        if node.domain not in (None, "", "ai.onnx"):
            continue
        _moved_operand(node, opset, names)
        _clip_bounds(node, opset)
        _drop_defaults(node, opset)
    return graph


def _moved_operand(node: gs.Node, opset: int, names: NameSource) -> None:
    moved = opforms.ATTRIBUTE_CANONICAL.get(node.op)
    if moved is None or opset < moved.since or moved.attr not in node.attrs:
        return
    values = node.attrs.pop(moved.attr)
    if values is None or len(values) == 0:
        return
    while len(node.inputs) < moved.index:
        node.inputs.append(gs.Variable.empty())
    const = gs.Constant(names(f"{node.name or node.op}_{moved.attr}"), np.array(list(values), dtype=np.int64))
    node.inputs.insert(moved.index, const)


def _clip_bounds(node: gs.Node, opset: int) -> None:
    if node.op != "Clip" or opset >= opforms.CLIP_SINCE:
        return
    for index, attr in ((1, "min"), (2, "max")):
        if len(node.inputs) > index and isinstance(node.inputs[index], gs.Constant):
            node.attrs[attr] = float(constant_values(node.inputs[index]).reshape(-1)[0])
    del node.inputs[1:]


def _drop_defaults(node: gs.Node, opset: int) -> None:
    defaults = opforms.attribute_defaults(node.op, opset)
    for name, default in defaults.items():
        if name in node.attrs and _equal(node.attrs[name], default):
            del node.attrs[name]


def _equal(value: object, default: object) -> bool:
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    if isinstance(value, float) or isinstance(default, float):
        try:
            return float(value) == float(default)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
    return type(value) is type(default) and value == default
