"""Rebuild a shape vector from the fewest nodes: ``Shape`` reads of its symbolic dims, constants, a Concat.

Used by ``fold-shapes`` for reshape targets that cannot become constants. A plan is made of *parts*:
runs of static values (one constant), and runs of dims read from one tensor (``Shape(t, start, end)``
for contiguous dims from opset 15, else ``Shape(t)`` and a ``Gather``), read where
:class:`~gsrewrite.simplifier.dim_sources.DimSources` finds them, so rebuilt targets share few ``Shape``
reads. The rebuild only happens when it removes more nodes than it adds: the nodes that die are those of
the old chain that nothing else reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.graph.rewiring import ConstantPool
from gsrewrite.shapes.symdim import DimValue
from gsrewrite.simplifier.dim_sources import DimSources
from gsrewrite.simplifier.symbolic import ShapeValues

#: Largest backward cone (shape-computation nodes) examined when counting the nodes a rebuild frees.
_CONE_LIMIT = 64


@dataclass
class _Group:
    """Readers of one target tensor that all want the same vector, and its plan."""

    target: gs.Tensor
    parts: list[_Part]
    readers: list[tuple[gs.Node, int]]


@dataclass
class _Part:
    """Static ``values``, or ``axes`` of ``source`` (a run of dims read from one tensor): ``source`` is a tensor
    exactly when ``values`` is None."""

    values: list[int] | None = None
    source: Any = None
    axes: list[int] = field(default_factory=list)


class ShapeBuilder:
    """Builds shape vectors in ``graph``, sharing the ``Shape`` nodes it adds; ``added`` counts new nodes."""

    def __init__(self, graph: gs.Graph, pool: ConstantPool, names: Callable[[str], str],
                 values: ShapeValues) -> None:
        self.graph, self.names, self._pool = graph, names, pool
        self._shape_tensors: Collection[int] = values.values
        self.opset = int(graph.opset)
        self.added = 0
        self._cache: dict[tuple, gs.Tensor] = {}
        self._position = {id(n): i for i, n in enumerate(graph.nodes)}
        self._pending: dict[int, list[gs.Node]] = {}
        self._consumer: gs.Node | None = None
        self._sources = DimSources(graph, self._position, values.origins)

    def rebuild_all(self, requests: Sequence[tuple[gs.Node, int, Sequence[DimValue]]]) -> int:
        """Make input ``index`` of each ``node`` the vector ``elements`` where that saves nodes overall.

        Readers of one target tensor that want the same vector are decided together (their old chain dies
        only when all of them stop reading it) and share the new vector; a ``Shape`` read that several
        vectors need is counted once, shared among them. Returns the number of inputs rewired.
        """
        groups = self._groups(requests)
        uses = Counter(key for g in groups for key in self._new_reads(g.parts))
        freed = {id(g): self._freed(g.readers, g.target) for g in groups}
        accepted = [g for g in groups if self._shared_cost(g, uses) < freed[id(g)]]
        if accepted and self._total_cost(accepted) >= sum(freed[id(g)] for g in accepted):
            accepted = [g for g in accepted if self._total_cost([g]) < freed[id(g)]]
        for group in accepted:
            self._consumer = min((n for n, _ in group.readers), key=lambda n: self._position[id(n)])
            tensor = self._build(group.parts, self._consumer.name or self._consumer.op)
            for node, index in group.readers:
                node.inputs[index] = tensor
        return sum(len(g.readers) for g in accepted)

    def _groups(self, requests: Sequence[tuple[gs.Node, int, Sequence[DimValue]]]) -> list[_Group]:
        groups: dict[tuple, _Group] = {}
        for node, index, elements in requests:
            parts = self._plan(elements, self._position[id(node)])
            if parts is None:
                continue
            key = (id(node.inputs[index]), tuple(elements))
            group = groups.setdefault(key, _Group(node.inputs[index], parts, []))
            group.readers.append((node, index))
        return list(groups.values())

    def _new_reads(self, parts: Sequence[_Part]) -> list[tuple]:
        return [(id(p.source), tuple(p.axes)) for p in parts if p.values is None
                and (id(p.source), tuple(p.axes)) not in self._cache]

    def _shared_cost(self, group: _Group, uses: Counter) -> float:
        """New nodes for ``group``, a Shape read needed by several groups counting for its share."""
        reads = {(id(p.source), tuple(p.axes)): p for p in group.parts if p.values is None}
        shared = sum(self._cost(p) / uses[key] for key, p in reads.items() if key in uses)
        return shared + (len(group.parts) > 1)

    def _total_cost(self, groups: Sequence[_Group]) -> int:
        reads = {(id(p.source), tuple(p.axes)): p for g in groups for p in g.parts if p.values is None}
        return sum(self._cost(p) for p in reads.values()) + sum(len(g.parts) > 1 for g in groups)

    def finish(self) -> None:
        """Insert the nodes built so far into the graph, each group just before the node that needed it."""
        if not self._pending:
            return
        nodes: list[gs.Node] = []
        for node in self.graph.nodes:
            nodes.extend(self._pending.get(id(node), ()))
            nodes.append(node)
        self.graph.nodes = nodes
        self._pending.clear()

    # --- planning ---------------------------------------------------------------------------------------
    def _plan(self, elements: Sequence[DimValue], before: int) -> list[_Part] | None:
        """Constants and dim reads for ``elements``, readable by a node at position ``before``."""
        parts: list[_Part] = []
        i = 0
        while i < len(elements):
            element = elements[i]
            if isinstance(element, int):
                _extend_values(parts, element)
                i += 1
                continue
            found = self._sources.read(elements, i, before)
            if found is None:
                return None
            for axis in found[1]:
                self._extend_dims(parts, found[0], axis)
            i += len(found[1])
        return parts

    def _extend_dims(self, parts: list[_Part], source: gs.Tensor, axis: int) -> None:
        last = parts[-1] if parts else None
        if last is not None and last.source is source and (self.opset < 15 or last.axes[-1] + 1 == axis):
            last.axes.append(axis)
        else:
            parts.append(_Part(source=source, axes=[axis]))

    def _cost(self, part: _Part) -> int:
        if part.values is not None or (id(part.source), tuple(part.axes)) in self._cache:
            return 0
        if self._whole(part) or self.opset >= 15:
            return 1
        return 1 + ((id(part.source), None) not in self._cache)

    def _whole(self, part: _Part) -> bool:
        return part.source.shape is not None and part.axes == list(range(len(part.source.shape)))

    def _freed(self, readers: Sequence[tuple[gs.Node, int]], target: gs.Tensor) -> int:
        """How many local nodes die when ``readers`` stop reading ``target`` (one backward sweep)."""
        outputs = {id(t) for t in self.graph.outputs}
        leaving = {id(n) for n, _ in readers}
        dead: set[int] = set()
        for n in sorted(self._cone(target), key=lambda n: -self._position[id(n)]):
            if all(id(o) not in outputs and all(id(c) in dead or (id(c) in leaving and o is target) for c in o.outputs)
                   for o in n.outputs):
                dead.add(id(n))
        return len(dead)

    def _cone(self, tensor: gs.Tensor) -> list[gs.Node]:
        """The local nodes of the shape computation behind ``tensor`` (it stops at data tensors)."""
        cone: dict[int, gs.Node] = {}
        stack = [tensor]
        while stack and len(cone) < _CONE_LIMIT:
            t = stack.pop()
            if id(t) not in self._shape_tensors:
                continue
            producer = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
            if producer is None or id(producer) in cone or id(producer) not in self._position:
                continue
            cone[id(producer)] = producer
            stack.extend(producer.inputs)
        return list(cone.values())

    # --- building ---------------------------------------------------------------------------------------
    def _build(self, parts: Sequence[_Part], base: str) -> gs.Tensor:
        tensors = [self._part_tensor(p, base) for p in parts]
        if len(tensors) == 1:
            return tensors[0]
        length = sum(len(p.values if p.values is not None else p.axes) for p in parts)
        return self._node("Concat", tensors, {"axis": 0}, f"{base}_shape", length)

    def _part_tensor(self, part: _Part, base: str) -> gs.Tensor:
        if part.values is not None:
            return self._pool.get(np.array(part.values, dtype=np.int64), f"{base}_dims")
        key = (id(part.source), tuple(part.axes))
        if key not in self._cache:
            self._cache[key] = self._read_dims(part)
        return self._cache[key]

    def _read_dims(self, part: _Part) -> gs.Tensor:
        src, axes = part.source, part.axes
        if self._whole(part):
            return self._node("Shape", [src], {}, f"{src.name}_shape", len(axes))
        if self.opset >= 15 and axes == list(range(axes[0], axes[-1] + 1)):
            return self._node("Shape", [src], {"start": axes[0], "end": axes[-1] + 1}, f"{src.name}_dims", len(axes))
        whole_key = (id(src), None)
        if whole_key not in self._cache:
            rank = len(src.shape)
            self._cache[whole_key] = self._node("Shape", [src], {}, f"{src.name}_shape", rank)
        indices = self._pool.get(np.array(axes, dtype=np.int64), f"{src.name}_axes")
        return self._node("Gather", [self._cache[whole_key], indices], {"axis": 0}, f"{src.name}_dims", len(axes))

    def _node(self, op: str, inputs: list[gs.Tensor], attrs: dict, name: str, length: int) -> gs.Tensor:
        out = gs.Variable(self.names(name), dtype=np.int64, shape=[length])
        new = gs.Node(op, self.names(name), attrs=attrs, inputs=inputs, outputs=[out])
        self._pending.setdefault(id(self._consumer), []).append(new)
        self.added += 1
        return out


def _extend_values(parts: list[_Part], value: int) -> None:
    if parts and parts[-1].values is not None:
        parts[-1].values.append(value)
    else:
        parts.append(_Part(values=[value]))

