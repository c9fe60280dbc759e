"""Symbolic values of shape tensors, as the simplifier's passes read them: a view over the shape engine's values.

Exporters compute reshape targets at run time from ``Shape`` of some tensor. The engine's values for the graph
the passes leave (:mod:`gsrewrite.shapes.graph_values`: the engine's rules, every value proven for every size,
made in one walk and kept current as the passes change the graph) are seen here as a :class:`SymValue` per
small integer tensor of the shape arithmetic: a scalar or a 1-D list whose elements are dims of
:mod:`gsrewrite.shapes.symdim`:

* an ``int`` (known statically),
* an expression: a dim named by shape inference is the symbol of that name; a dim it left unnamed is a
  symbol of its own (:func:`dim_of`), equal only to itself; arithmetic on them is symdim's,
* ``None`` — a value not tracked (data-dependent values, arithmetic that would hold only for some sizes).

Where a symbol can be read again with a ``Shape`` node is data beside the expressions: :attr:`ShapeValues.origins`
(symbol -> the tensor and axis it was first read from). The passes use these values to fold chains whose
result is static, to write reshape targets as constants (``0`` = keep the input's dim, ``-1`` = the one
remaining dim), and to rebuild the rest with fewer nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_graphsurgeon as gs

from gsrewrite.graph.evaluate import slice_bounds
from gsrewrite.shapes import symdim
from gsrewrite.shapes.graph_values import dim_of, graph_values, named
from gsrewrite.shapes.rules import Info
from gsrewrite.shapes.symdim import DimValue
from gsrewrite.shapes.values import INT64_RANGE, is_int_type

__all__ = ["MAX_LENGTH", "Element", "Origin", "ShapeValues", "SymValue", "dim_of", "named", "propagate",
           "readable"]

#: Longest integer vector seen (shape vectors are short; larger ones are data).
MAX_LENGTH = 16

Element = DimValue | None
Origin = tuple[gs.Tensor, int]


@dataclass(frozen=True)
class SymValue:
    """The value of a scalar (``scalar=True``, one element) or 1-D integer tensor."""

    elements: tuple[Element, ...]
    scalar: bool = False

    @property
    def static(self) -> bool:
        """True when every element is a known int."""
        return all(isinstance(e, int) for e in self.elements)


@dataclass
class ShapeValues:
    """The result of :func:`propagate`: values by tensor id, and where each symbol can be read again."""

    values: dict[int, SymValue] = field(default_factory=dict)
    #: symbol name -> (tensor, axis) of the first ``Shape`` read of it
    origins: dict[str, Origin] = field(default_factory=dict)

    def get(self, tensor: gs.Tensor) -> SymValue | None:
        return self.values.get(id(tensor))

    def __bool__(self) -> bool:
        return bool(self.values)


def readable(element: Element) -> bool:
    """True when ``element`` is one dim (a symbol), which a ``Shape`` node can read."""
    return symdim.symbol_name(element) is not None


def propagate(graph: gs.Graph) -> ShapeValues:
    """Symbolic values of the integer tensors computed by ``graph``'s nodes (the engine's, as they stand now)."""
    engine = graph_values(graph)
    result = ShapeValues()
    values = result.values
    for node, info in engine.found:
        value = _seen(info)
        if value is None:
            continue
        values[id(node.outputs[0])] = value
        if node.op == "Shape":
            for axis, element in zip(_shape_axes(node), value.elements, strict=True):
                name = symdim.symbol_name(element)
                if name is not None and name not in result.origins:
                    result.origins[name] = (node.inputs[0], axis)
    return result


def _seen(info: Info) -> SymValue | None:
    """The engine's value of an integer scalar or short 1-D tensor, its elements ints or dims."""
    shape = info.shape
    if shape is None or len(shape) > 1 or not is_int_type(info.dtype):
        return None
    items = info.value if isinstance(info.value, list) else [info.value]
    if len(items) > MAX_LENGTH or (shape and shape[0] != len(items)):
        return None
    elements = tuple(e if isinstance(e, symdim.Expr) or (isinstance(e, int) and INT64_RANGE[0] <= e <= INT64_RANGE[1])
                     else None for e in items)
    return SymValue(elements, scalar=not shape)


def _shape_axes(node: gs.Node) -> range:
    """The axes a Shape node reads (its ``start``/``end`` resolved)."""
    rank = len(node.inputs[0].shape)
    start, end = int(node.attrs.get("start", 0)), node.attrs.get("end")
    return range(rank)[slice_bounds(start, rank if end is None else int(end), 1, rank)]
