"""``eliminate-common-subexpressions``: nodes that compute the same thing from the same inputs are merged.

Two nodes are the same computation when they have the same op (default ONNX domain only: custom ops may
be stateful), attributes and input tensors (in any order for commutative ops). Visiting nodes in
topological order, each node's outputs are replaced by those of the first node with the same key, so
whole duplicated chains collapse in one sweep (run ``deduplicate-constants`` first so that equal constants
are the same tensor). Random ops and nodes holding subgraphs are never merged, and a node writing a graph
output is never the one removed.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from gsrewrite.graph.twins import merge_twins
from gsrewrite.simplifier.passes.base import SimplifyPass


class EliminateCommonSubexpressions(SimplifyPass):
    name = "eliminate-common-subexpressions"
    description = "Merge nodes that compute the same op on the same inputs (common-subexpression elimination)."

    def apply(self, graph: gs.Graph) -> int:
        # a node whose inputs nobody else reads has no twin
        return merge_twins(graph, lambda n: not n.inputs or any(len(t.outputs) > 1 for t in n.inputs))
