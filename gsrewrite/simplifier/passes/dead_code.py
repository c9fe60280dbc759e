"""``eliminate-dead-code``: nodes that contribute to no graph output are removed.

One backward sweep over the (topologically sorted) nodes marks what the graph outputs need; a node holding
subgraphs also needs every outer tensor its bodies read. Constants nobody reads disappear with the nodes
that read them. Graph inputs are kept even when unused (removing one would change the model's signature),
and so are the inputs of subgraphs (a Loop body's inputs are positional).
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from gsrewrite.graph.core import may_hold_subgraphs
from gsrewrite.graph.rewiring import disconnect
from gsrewrite.simplifier.passes.base import SimplifyPass


class EliminateDeadCode(SimplifyPass):
    name = "eliminate-dead-code"
    description = "Remove nodes whose outputs nothing reads (and constants nothing uses)."

    def apply(self, graph: gs.Graph) -> int:
        live = {id(t) for t in graph.outputs}
        dead: list[gs.Node] = []
        for node in reversed(graph.nodes):
            if any(id(t) in live for t in node.outputs):
                live.update(id(t) for t in node.inputs)
                if may_hold_subgraphs(node):
                    live.update(id(t) for t in outer_reads(node))
            else:
                dead.append(node)
        if not dead:
            return 0
        for node in dead:
            disconnect(node)
        removed = {id(n) for n in dead}
        graph.nodes = [n for n in graph.nodes if id(n) not in removed]
        return len(dead)


def outer_reads(node: gs.Node) -> list[gs.Tensor]:
    """Tensors from outside that the subgraphs held by ``node`` (recursively) read."""
    reads: list[gs.Tensor] = []
    for sub in node.subgraphs(recursive=False):
        local = {id(t) for n in sub.nodes for t in n.outputs} | {id(t) for t in sub.inputs}
        for inner in sub.nodes:
            reads.extend(t for t in inner.inputs if id(t) not in local)
            reads.extend(t for t in outer_reads(inner) if id(t) not in local)
        reads.extend(t for t in sub.outputs if id(t) not in local)
    return reads
