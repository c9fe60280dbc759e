"""``merge-reshapes``: a Reshape to an explicit shape reads through a preceding reshaping node.

``Reshape(Reshape(x, s1), s2)`` is ``Reshape(x, s2)`` whenever ``s2`` is a constant without ``0`` entries
(``0`` copies a dim of the *intermediate* tensor) or ``allowzero`` is set: only the element order matters,
and Reshape, Flatten, Squeeze and Unsqueeze all keep it. The first node dies when nothing else reads it.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from gsrewrite.graph.rewiring import (
    constant_ints,
    disconnect_if_unused,
    drop_disconnected,
    forward,
    is_standard,
    same_shape,
)
from gsrewrite.simplifier.passes.base import SimplifyPass

#: Ops that only change the shape, never the order of elements.
RESHAPING = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


class MergeReshapes(SimplifyPass):
    name = "merge-reshapes"
    description = "Let a Reshape to a fixed shape skip a preceding Reshape/Flatten/Squeeze/Unsqueeze."

    def apply(self, graph: gs.Graph) -> int:
        count = 0
        for node in graph.nodes:
            if node.op != "Reshape" or not is_standard(node) or len(node.inputs) < 2 or not node.outputs:
                continue
            src = node.inputs[0]
            first = src.inputs[0] if isinstance(src, gs.Variable) and src.inputs else None
            if first is None or first.op not in RESHAPING or not is_standard(first) or not _explicit(node):
                continue
            node.inputs[0] = first.inputs[0]
            disconnect_if_unused(first, graph)
            count += 1
            if same_shape(node.inputs[0], node.outputs[0]):
                forward(graph, node, node.inputs[0], node.outputs[0])
        if count:
            drop_disconnected(graph)
        return count


def _explicit(node: gs.Node) -> bool:
    shape = constant_ints(node.inputs[1])
    return shape is not None and (0 not in shape or bool(node.attrs.get("allowzero", 0)))
