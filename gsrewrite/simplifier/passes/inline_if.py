"""``inline-constant-if``: an ``If`` whose condition is a constant is replaced by the branch it always takes.

Exporters trace data-dependent Python ``if``s on values that are fixed in the exported model (a sample-rate
input fixed by ``--input-shape``, a config flag); once folding makes the condition a constant, the taken
branch's nodes move into the enclosing graph at the If's place and write the If's outputs; the other branch is
dropped. Branch tensors whose names the enclosing graph already uses are renamed. Exact.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from gsrewrite.graph.core import NameSource
from gsrewrite.graph.rewiring import constant, disconnect, is_standard, replace_uses
from gsrewrite.simplifier.passes.base import SimplifyPass


class InlineConstantIf(SimplifyPass):
    name = "inline-constant-if"
    description = "Replace an If whose condition is constant by the nodes of the branch it takes."

    def apply(self, graph: gs.Graph) -> int:
        names = NameSource(graph)
        count = 0
        index = 0
        while index < len(graph.nodes):
            node = graph.nodes[index]
            branch = _taken_branch(node)
            if branch is None:
                index += 1
                continue
            inlined = _inline(graph, node, branch, names)
            graph.nodes[index:index + 1] = inlined
            index += len(inlined)
            count += 1
        return count


def _taken_branch(node: gs.Node) -> gs.Graph | None:
    if node.op != "If" or not is_standard(node) or not node.inputs:
        return None
    cond = constant(node.inputs[0])
    if cond is None or cond.size != 1:
        return None
    branch = node.attrs.get("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
    if not isinstance(branch, gs.Graph) or len(branch.outputs) != len(node.outputs):
        return None
    return branch


def _inline(graph: gs.Graph, node: gs.Node, branch: gs.Graph, names: NameSource) -> list[gs.Node]:
    """The branch's nodes, now writing the If's outputs (plus Identity nodes where a branch output is not
    written by a branch node); ``node`` is disconnected."""
    outputs = list(node.outputs)
    disconnect(node)
    local = {id(n) for n in branch.nodes}
    outside = set(graph.tensors()) | {t.name for t in outputs}
    produced = [t for n in branch.nodes for t in n.outputs]
    renamed = {id(t) for t in outputs}
    extra: list[gs.Node] = []
    for mine, theirs in zip(outputs, branch.outputs, strict=True):
        producer = theirs.inputs[0] if isinstance(theirs, gs.Variable) and theirs.inputs else None
        if producer is None or id(producer) not in local or id(theirs) in renamed:
            extra.append(gs.Node("Identity", names(f"{node.name}_out"), inputs=[theirs], outputs=[mine]))
            continue
        replace_uses(theirs, mine)
        position = next(i for i, t in enumerate(producer.outputs) if t is theirs)
        producer.outputs[position] = mine
        renamed.add(id(theirs))
    for tensor in produced:
        if id(tensor) not in renamed and tensor.name in outside:
            tensor.name = names(tensor.name)
    node_names = {n.name for n in graph.nodes}
    for inner in branch.nodes:
        if inner.name and inner.name in node_names:
            inner.name = names(inner.name)
    return list(branch.nodes) + extra
