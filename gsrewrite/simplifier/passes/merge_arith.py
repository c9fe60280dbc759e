"""``merge-constant-arith``: ``(x * c1) * c2`` becomes ``x * (c1 * c2)``, and ``(x + c1) + c2`` becomes
``x + (c1 + c2)``.

Exporters leave such chains where a scale and a normalization meet (``x * 0.5 * 2.0``, ``x + mean + shift``).
The constants are combined once, in their own type; for integers the result is exact (wrap-around arithmetic is
associative), for floats it equals the original up to one rounding, which validation checks. The inner node's
output must be read by the outer node alone; the broadcast shape of the result cannot change (broadcasting is
associative).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import NameSource
from gsrewrite.graph.rewiring import constant, drop_disconnected, forward, is_standard, sole_reader
from gsrewrite.simplifier.passes.base import SimplifyPass

#: largest combined constant (elements) worth creating
_MAX_ELEMENTS = 1 << 16


class MergeConstantArith(SimplifyPass):
    name = "merge-constant-arith"
    description = "Merge chains of Mul (or Add) by constants into one: (x*c1)*c2 -> x*(c1*c2)."

    def apply(self, graph: gs.Graph) -> int:
        names = NameSource(graph)
        count = 0
        for node in list(graph.nodes):
            if node.op not in ("Mul", "Add") or not is_standard(node) or len(node.inputs) != 2:
                continue
            found = _inner(node, graph)
            if found is None:
                continue
            inner, x, c1, c2 = found
            combined = c1 * c2 if node.op == "Mul" else c1 + c2
            if combined.size > _MAX_ELEMENTS:
                continue
            merged = gs.Constant(names(f"{inner.name}_merged"), np.asarray(combined, dtype=c1.dtype))
            inner.inputs[0], inner.inputs[1] = x, merged
            if forward(graph, node, inner.outputs[0], node.outputs[0]):
                count += 1
        if count:
            drop_disconnected(graph)
        return count


def _inner(node: gs.Node, graph: gs.Graph) -> tuple[gs.Node, gs.Tensor, np.ndarray, np.ndarray] | None:
    """The inner node of the same op, its data operand, and both constants, when the chain can merge."""
    for data, other in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        c2 = constant(other)
        if c2 is None or not isinstance(data, gs.Variable) or len(data.inputs) != 1:
            continue
        inner = data.inputs[0]
        if inner.op != node.op or not is_standard(inner) or len(inner.inputs) != 2:
            continue
        if not sole_reader(data, node, graph):
            continue
        for x, c in ((inner.inputs[0], inner.inputs[1]), (inner.inputs[1], inner.inputs[0])):
            c1 = constant(c)
            if c1 is not None and constant(x) is None and c1.dtype == c2.dtype and c1.dtype.kind in "iuf":
                return inner, x, c1, c2
    return None
