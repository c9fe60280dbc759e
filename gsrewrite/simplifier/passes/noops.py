"""``eliminate-noops``: nodes that return their input unchanged are bypassed (rules in
:mod:`gsrewrite.graph.noops`, shared with canonicalization before matching)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from gsrewrite.graph.noops import DESCRIPTION, bypass_noops
from gsrewrite.simplifier.passes.base import SimplifyPass


class EliminateNoops(SimplifyPass):
    name = "eliminate-noops"
    description = DESCRIPTION

    def apply(self, graph: gs.Graph) -> int:
        return bypass_noops(graph)
