"""``merge-transposes``: ``Transpose(Transpose(x, p1), p2)`` becomes one ``Transpose(x, p1[p2])``.

The second Transpose reads ``x`` directly with the composed permutation (the first one dies when nothing
else reads it) and disappears when the composition is the identity.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from gsrewrite.graph.rewiring import disconnect_if_unused, drop_disconnected, forward, is_standard, rank
from gsrewrite.simplifier.passes.base import SimplifyPass


class MergeTransposes(SimplifyPass):
    name = "merge-transposes"
    description = "Merge consecutive Transposes into one (or none when they cancel out)."

    def apply(self, graph: gs.Graph) -> int:
        count = 0
        for node in graph.nodes:
            first = _transpose_input(node)
            if first is None:
                continue
            inner, outer = _perm(first), _perm(node)
            if inner is None or outer is None or len(inner) != len(outer):
                continue
            node.inputs[0] = first.inputs[0]
            node.attrs["perm"] = [inner[p] for p in outer]
            disconnect_if_unused(first, graph)
            count += 1
            if node.attrs["perm"] == list(range(len(outer))):
                forward(graph, node, node.inputs[0], node.outputs[0])
        if count:
            drop_disconnected(graph)
        return count


def _transpose_input(node: gs.Node) -> gs.Node | None:
    if node.op != "Transpose" or not is_standard(node) or not node.outputs:
        return None
    src = node.inputs[0]
    first = src.inputs[0] if isinstance(src, gs.Variable) and src.inputs else None
    return first if first is not None and first.op == "Transpose" and is_standard(first) else None


def _perm(node: gs.Node) -> list[int] | None:
    perm = node.attrs.get("perm")
    if perm is not None:
        return [int(p) for p in perm]
    r = rank(node.inputs[0])
    return None if r is None else list(reversed(range(r)))
