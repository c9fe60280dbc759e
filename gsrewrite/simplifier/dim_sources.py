"""Where the symbolic dims of a shape vector can be read again (for ``fold-shapes``' rebuilt targets).

A named dim (``batch``, ``unk__3``) is the same value wherever it appears, so it can be read from any
tensor that has it — the rebuilt vectors share few ``Shape`` reads when they all use the same source: one
of the first tensors (graph inputs first, then in topological order) that have the dim, the one with the
longest run of the wanted dims next to each other (one ``Shape(t, start, end)`` instead of several). A
source must be computed before the node that will read it, so that no cycle appears.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx_graphsurgeon as gs

from gsrewrite.shapes.symdim import DimValue, symbol_name
from gsrewrite.simplifier.symbolic import Origin, named


class DimSources:
    """Where each named dim occurs (first few tensors, in order), with the positions of the graph's nodes;
    ``origins`` (symbol -> tensor and axis) says where any other dim was read."""

    #: Occurrences remembered per dim name (the first ones: the earliest tensors).
    KEEP = 8

    def __init__(self, graph: gs.Graph, position: dict[int, int], origins: Mapping[str, Origin]) -> None:
        self._graph, self._position, self._origins = graph, position, origins
        self._occurrences: dict[str, list[tuple[gs.Tensor, int]]] | None = None

    def read(self, elements: Sequence[DimValue], start: int, before: int) -> tuple[gs.Tensor, list[int]] | None:
        """The longest run of dims from ``elements[start]`` readable from one tensor computed before the
        node at position ``before``: (tensor, its axes), or None when the dim cannot be read anywhere."""
        names = []
        for element in elements[start:]:
            name = named(element)
            if name is None:
                break
            names.append(name)
        best: tuple[gs.Tensor, list[int]] | None = None
        for tensor, axis in self._index().get(names[0], []) if names else []:
            length = _run_length(tensor, axis, names)
            if self._computed_before(tensor, before) and (best is None or length > len(best[1])):
                best = tensor, list(range(axis, axis + length))
        if best is not None:
            return best
        symbol = symbol_name(elements[start])
        origin = self._origins.get(symbol) if symbol is not None else None
        if origin is not None and self._computed_before(origin[0], before):
            return origin[0], [origin[1]]
        return None

    def _index(self) -> dict[str, list[tuple[gs.Tensor, int]]]:
        if self._occurrences is None:
            self._occurrences = {}
            for tensor in [*self._graph.inputs, *(t for n in self._graph.nodes for t in n.outputs)]:
                for axis, d in enumerate(tensor.shape or ()):
                    if isinstance(d, str) and d:
                        found = self._occurrences.setdefault(d, [])
                        if len(found) < self.KEEP:
                            found.append((tensor, axis))
        return self._occurrences

    def _computed_before(self, tensor: gs.Tensor, before: int) -> bool:
        producer = tensor.inputs[0] if isinstance(tensor, gs.Variable) and tensor.inputs else None
        return producer is None or self._position.get(id(producer), before) < before


def _run_length(tensor: gs.Tensor, axis: int, names: list[str]) -> int:
    """How many of ``names`` ``tensor`` has next to each other from ``axis`` on."""
    dims = tensor.shape
    length = 0
    while length < len(names) and axis + length < len(dims) and dims[axis + length] == names[length]:
        length += 1
    return length

