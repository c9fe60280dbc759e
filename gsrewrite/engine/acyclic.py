"""Whether replacing a match would make a cycle, answered without walking the whole graph per match.

A replacement reads the match's inputs and writes its outputs: when some input is computed (through nodes
outside the match) from an output, the fused node would feed itself. The original graph has no such cycle
when that path leaves the match from a node that does not lead to the node reading the input (a mask built
from the shape of the keys, read again by a Shape after the match was cut out and pointed at the match's
output: T5's zero position bias of a layer without relative attention), so the replace step asks.

:class:`Positions` numbers the nodes in a topological order once per sweep; a path from an output to an input
only visits nodes numbered below the input's producer, so the search stops there (nothing to visit for an
ordinary match, whose inputs are computed before its outputs are read). Nodes a replacement adds are placed
between their producers and consumers when there is room, else the numbering is made again at the next
question. Nodes without a number are always visited, so an answer is never wrong, only slower.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx_graphsurgeon as gs

from gsrewrite.graph.core import may_hold_subgraphs

_INF = float("inf")


class Positions:
    """Topological positions of ``graph``'s nodes (made again after :meth:`invalidate`)."""

    def __init__(self, graph: gs.Graph) -> None:
        self.graph = graph
        self._pos: dict[int, float] | None = None

    def invalidate(self) -> None:
        self._pos = None

    def _positions(self) -> dict[int, float]:
        if self._pos is None:
            self._pos = _number(self.graph.nodes)
        return self._pos

    def of(self, node: gs.Node) -> float | None:
        return self._positions().get(id(node))

    def path(self, starts: Iterable[gs.Tensor], targets: Iterable[gs.Tensor], skip: set[int]) -> list[gs.Node]:
        """The nodes of a path from a tensor of ``starts`` to one of ``targets`` through consumers not in ``skip``
        ([] when there is none; a start that is a target is a path of no nodes, reported as [] too: a match
        never binds one tensor as both)."""
        pos = self._positions()
        wanted = {id(t) for t in targets}
        limit = -1.0  # a path ends at a target's producer: it visits no node placed after the last of them
        for tensor in targets:
            producer = tensor.inputs[0] if tensor.inputs else None
            if producer is not None:
                found = pos.get(id(producer))
                limit = max(limit, found if found is not None else _INF)
        if limit < 0:
            return []
        parent: dict[int, tuple[gs.Node, int | None]] = {}
        stack: list[tuple[gs.Tensor, int | None]] = [(t, None) for t in starts]
        seen: set[int] = set()
        while stack:
            tensor, via = stack.pop()
            for node in tensor.outputs:
                if id(node) in skip or id(node) in seen:
                    continue
                place = pos.get(id(node))
                if place is not None and place > limit:
                    continue
                seen.add(id(node))
                parent[id(node)] = (node, via)
                for out in node.outputs:
                    if id(out) in wanted:
                        return _trail(parent, id(node))
                    stack.append((out, id(node)))
        return []

    def placed(self, added: list[gs.Node], skip: set[int]) -> None:
        """Give the nodes a replacement ``added`` positions between their producers and their consumers (in
        ``added``'s order), or drop the numbering when there is no room (``skip``: the nodes it removed)."""
        if self._pos is None:
            return
        pos = self._pos
        mine = {id(n) for n in added}
        low, high = -_INF, _INF
        for node in added:
            for tensor in node.inputs:
                for producer in tensor.inputs:
                    if id(producer) not in mine and id(producer) not in skip:
                        low = max(low, pos.get(id(producer), _INF))
            for tensor in node.outputs:
                for consumer in tensor.outputs:
                    if id(consumer) not in mine and id(consumer) not in skip:
                        high = min(high, pos.get(id(consumer), -_INF))
        if low == -_INF:
            low = high - len(added) - 1 if high != _INF else 0.0
        if high == _INF:
            high = low + len(added) + 1
        step = (high - low) / (len(added) + 1)
        if not low < high or step <= abs(high) * 1e-9 or any(may_hold_subgraphs(n) for n in added):
            self._pos = None
            return
        for i, node in enumerate(added):
            pos[id(node)] = low + step * (i + 1)

    def rewired(self, reader: gs.Node, added: list[gs.Node]) -> None:
        """``reader`` reads other tensors now, some computed by the new nodes ``added`` (in order): they are placed
        just before it, and the numbering is kept only if it still holds."""
        if self._pos is None:
            return
        pos = self._pos
        place = pos.get(id(reader))
        if place is None:
            self._pos = None
            return
        for i, node in enumerate(added):  # between the reader and the node before it in the order
            pos[id(node)] = place - (len(added) - i) / (len(added) + 1)
        for node in [*added, reader]:
            for tensor in node.inputs:
                for producer in tensor.inputs:
                    before = pos.get(id(producer))
                    if before is None or not before < pos[id(node)]:
                        self._pos = None
                        return


def _trail(parent: dict[int, tuple[gs.Node, int | None]], last: int) -> list[gs.Node]:
    trail: list[gs.Node] = []
    current: int | None = last
    while current is not None:
        node, current = parent[current]
        trail.append(node)
    return trail[::-1]


def _number(nodes: list[gs.Node]) -> dict[int, float]:
    """Positions in a topological order (an iterative depth-first walk, producers first); nodes on a cycle or
    after a node holding subgraphs (whose outer-scope reads are edges no tensor shows) get none."""
    index = {id(node): i for i, node in enumerate(nodes)}
    if any(may_hold_subgraphs(node) for node in nodes):
        return {}
    state = [0] * len(nodes)
    out: dict[int, float] = {}
    for start in range(len(nodes)):
        if state[start]:
            continue
        state[start] = 1
        stack = [(start, 0)]
        while stack:
            i, k = stack.pop()
            inputs = nodes[i].inputs
            while k < len(inputs):
                producer = inputs[k].inputs[0] if inputs[k].inputs else None
                k += 1
                j = index.get(id(producer)) if producer is not None else None
                if j is None or state[j] == 2:
                    continue
                if state[j] == 1:  # a cycle: no positions (every question walks the graph)
                    return {}
                state[j] = 1
                stack.append((i, k))
                stack.append((j, 0))
                break
            else:
                state[i] = 2
                out[id(nodes[i])] = float(len(out))
    return out


def cycle_reason(match_inputs: dict[str, gs.Tensor], match_outputs: dict[str, gs.Tensor], removed: set[int],
                 positions: Positions) -> str:
    """Why a replacement reading ``match_inputs`` and writing ``match_outputs`` (template name -> tensor) in place
    of the nodes ``removed`` would make a cycle ('' when it would not)."""
    variables = {name: t for name, t in match_inputs.items() if isinstance(t, gs.Variable) and t.inputs}
    if not variables:
        return ""
    for out_name, out in match_outputs.items():
        trail = positions.path([out], variables.values(), removed)
        if trail:
            reached = {id(t) for t in trail[-1].outputs}
            name, tensor = next((n, t) for n, t in variables.items() if id(t) in reached)
            through = ", ".join(repr(n.name or n.op) for n in trail[:3]) + (", ..." if len(trail) > 3 else "")
            return (f"its replacement would make a cycle: input {name!r} ('{tensor.name}') is computed from output "
                    f"{out_name!r} ('{out.name}') through {through}")
    return ""
