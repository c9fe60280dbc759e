"""The engine's values for an onnx-graphsurgeon graph as the passes leave it: what the simplifier folds.

Exporters compute reshape targets at run time from ``Shape`` of some tensor (``Shape -> Gather/Slice ->
Unsqueeze -> Concat``). :class:`GraphValues` applies the engine's rules (:mod:`gsrewrite.shapes.rules`, the ones
the model walk uses) to the nodes of a graph, under :func:`gsrewrite.shapes.values.proving`: an element a rule
would have to assume (a truncation taken as a floor, a small Slice bound inside a dim, an integer past int64)
is unknown instead, so every value it gives holds for every size the symbols may take — those values become
constants in the model.

The dims a ``Shape`` reads are the graph's, as ONNX's inference (and the walk sharpening it at import) left them:
an ``int``, the symbol of the name ONNX gave (``batch``, ``unk__3``; one name is one value throughout the model),
or for a dim left unnamed a symbol of its own (:func:`dim_of`), equal only to itself.

One walk: the values are made once per graph (:func:`graph_values`) and kept with it. When asked again after the
passes changed the graph, only the nodes whose inputs, attributes or read dims changed (and the nodes reading
them) are evaluated again; :data:`COUNTS` counts the walks from scratch and the node evaluations.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper
from onnx_graphsurgeon.ir.tensor import LazyValues

from gsrewrite.shapes import symdim
from gsrewrite.shapes.handlers import STANDARD_DOMAINS
from gsrewrite.shapes.rules import RULES, Dim, Info, NodeView
from gsrewrite.shapes.symdim import DimValue
from gsrewrite.shapes.values import MAX_VALUE_LENGTH, constant_value, proving

#: The first character of the symbol of a dim shape inference left unnamed (a ``dim_param`` never starts so in
#: practice; the symbol also holds the tensor's ``id``, which no model can know).
UNNAMED = "\x00"
#: The domains of the standard ops (onnx-graphsurgeon leaves the default one None).
_STANDARD = frozenset({*STANDARD_DOMAINS, None})
#: Ops whose output value reads its input's dims, not only its values.
_DIM_READERS = frozenset({"Shape", "Size"})


@dataclass
class Counts:
    """Work done by :class:`GraphValues` in this process: walks from scratch, the times values were asked for (each
    after the first brings them up to date), node evaluations (the first walk's and those of the nodes the passes
    changed since)."""

    walks: int = 0
    refreshes: int = 0
    evaluations: int = 0


COUNTS = Counts()


def dim_of(tensor: gs.Tensor, axis: int) -> DimValue:
    """Dimension ``axis`` of ``tensor``: an int, the symbol shape inference named, or a symbol of its own."""
    d = tensor.shape[axis]
    if isinstance(d, int) and d >= 0:
        return d
    return symdim.sym(d if isinstance(d, str) and d else f"{UNNAMED}{id(tensor)}:{axis}")


def named(element: object) -> str | None:
    """The name shape inference gave the dim ``element`` (``batch``, ``unk__3``), None for anything else."""
    name = symdim.symbol_name(element)
    return None if name is None or name.startswith(UNNAMED) else name


class GraphValues:
    """The values of ``graph``'s tensors (see the module docstring); :meth:`refresh` brings them up to date."""

    def __init__(self, graph: gs.Graph) -> None:
        self._graph = weakref.ref(graph)
        #: id(tensor) -> what the rules found for it (node outputs with a value only)
        self.values: dict[int, Info] = {}
        #: the nodes whose output has a value, in the graph's order, with that output's info
        self.found: list[tuple[gs.Node, Info]] = []
        #: id(node) -> (the node, what its evaluation read, its output's info)
        self._memo: dict[int, tuple[gs.Node, tuple, Info | None]] = {}
        #: id(constant) -> (the constant, its storage, its info): small constants only
        self._constants: dict[int, tuple[gs.Constant, Any, Info]] = {}
        self._opset = 0
        COUNTS.walks += 1
        self.refresh()

    def refresh(self) -> None:
        """Evaluate the nodes whose inputs, attributes or read dims changed since the last time (all of them the
        first time), in the graph's order."""
        graph = self._graph()
        if graph is None:
            return
        COUNTS.refreshes += 1
        self._opset = int(graph.opset)
        memo: dict[int, tuple[gs.Node, tuple, Info | None]] = {}
        self.values = values = {}
        self.found = found = []
        with proving():
            for node in graph.nodes:
                op = node.op
                if op not in RULES or len(node.outputs) != 1 or node.domain not in _STANDARD:
                    continue
                if op not in _DIM_READERS and not (node.inputs and self._has_value(node.inputs[0])):
                    continue  # (every rule's value but Shape's and Size's is made of its first input's)
                inputs = [self._info(t) for t in node.inputs]
                key = self._key(node, inputs)
                known = self._memo.get(id(node))
                out = known[2] if known is not None and known[0] is node and _same(known[1], key) \
                    else self._evaluate(node, inputs)
                memo[id(node)] = (node, key, out)
                if out is not None and out.has_value:
                    values[id(node.outputs[0])] = out
                    found.append((node, out))
        self._memo = memo

    def get(self, tensor: gs.Tensor) -> Info | None:
        """What the rules found for ``tensor``: a node output with a value (constants are read where used)."""
        return self.values.get(id(tensor))

    # --- inputs ------------------------------------------------------------------------------------------
    def _has_value(self, tensor: gs.Tensor) -> bool:
        if isinstance(tensor, gs.Constant):
            return self._constant(tensor).has_value
        return id(tensor) in self.values

    def _info(self, tensor: gs.Tensor) -> Info | None:
        """``tensor`` for a rule: its dtype, its dims as symbols (:func:`dim_of`), its value where known."""
        found = self.values.get(id(tensor))
        if found is not None:
            return found
        if isinstance(tensor, gs.Constant):
            return self._constant(tensor)
        if not tensor.name:
            return None  # an omitted optional input
        shape = tensor.shape
        dims: list[Dim] | None = None if shape is None else [dim_of(tensor, axis) for axis in range(len(shape))]
        return Info(_onnx_dtype(tensor.dtype), dims)

    def _constant(self, tensor: gs.Constant) -> Info:
        """A constant's info; its value when it is a small integer one."""
        known = self._constants.get(id(tensor))
        if known is not None and known[0] is tensor and known[1] is tensor._values:
            return known[2]
        shape = list(tensor.shape)
        info = Info(_onnx_dtype(tensor.dtype), shape)
        if math.prod(shape) > MAX_VALUE_LENGTH:
            return info  # (a weight: not kept, its storage is left alone)
        array = _small_values(tensor)
        if array.dtype.kind in "biu":
            info.value = constant_value(array)
            info.has_value = info.value is not None
        self._constants[id(tensor)] = (tensor, tensor._values, info)
        return info

    def _key(self, node: gs.Node, inputs: list[Info | None]) -> tuple:
        """What an evaluation of ``node`` reads: its op, attributes, input tensors, their values (the infos
        themselves) or types, and its output's dtype."""
        return (node.op, _attrs_key(node.attrs), node.outputs[0].dtype, *node.inputs,
                *(v for v in node.attrs.values() if isinstance(v, gs.Tensor)),
                *(i if i is None or i.has_value else _dims_key(i) for i in inputs))

    def _evaluate(self, node: gs.Node, inputs: list[Info | None]) -> Info | None:
        COUNTS.evaluations += 1
        attrs: dict[str, Any] = {}
        for name, attr in node.attrs.items():
            if isinstance(attr, gs.Constant) and math.prod(attr.shape) <= MAX_VALUE_LENGTH:
                attr = numpy_helper.from_array(_small_values(attr))  # (ConstantOfShape's value, as ONNX's)
            elif isinstance(attr, (gs.Tensor, gs.Graph)):
                return None  # (no rule of a value reads a large tensor, a graph or a reference)
            attrs[name] = attr
        view = NodeView(node.op, inputs, attrs, self._opset, 1, _fresh)
        try:
            outputs = RULES[node.op](view)
        except Exception:  # a rule meeting a shape it did not expect: unknown, not an error
            return None
        return outputs[0] if outputs else None


def _same(a: tuple, b: tuple) -> bool:
    """Keys equal: tensors and infos by identity, the rest by value."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is y:
            continue
        if isinstance(x, (gs.Tensor, Info)) or isinstance(y, (gs.Tensor, Info)) or x != y:
            return False
    return True


def graph_values(graph: gs.Graph) -> GraphValues:
    """The values of ``graph`` (one walk, kept with the graph: see the module docstring), brought up to date."""
    known: GraphValues | None = _KEPT.get(id(graph))
    if known is not None and known._graph() is graph:
        known.refresh()
        return known
    made = GraphValues(graph)
    _KEPT[id(graph)] = made
    weakref.finalize(graph, _KEPT.pop, id(graph), None)
    return made


_KEPT: dict[int, GraphValues] = {}


def _small_values(tensor: gs.Constant) -> np.ndarray:
    """A small constant's values, its lazy storage left in place (onnx-graphsurgeon's ``values`` would replace it by
    the array, and the export would then write the array back instead of the original tensor)."""
    stored = tensor._values
    return np.asarray(stored.load() if isinstance(stored, LazyValues) else stored)


def _fresh(hint: str) -> symdim.Expr:
    """A dim no rule of the values reads back (the view's dims are the graph's)."""
    return symdim.sym(f"{UNNAMED}fresh:{hint}")


def _dims_key(info: Info) -> Any:
    return ("type", info.dtype, None if info.shape is None else tuple(info.shape))


def _attrs_key(attrs: dict[str, Any]) -> tuple:
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()
                 if not isinstance(v, (gs.Tensor, gs.Graph, np.ndarray)))


_DTYPES: dict[Any, int] = {}


def _onnx_dtype(dtype: Any) -> int:
    """The ONNX element type of a numpy (or ONNX) dtype; 0 when unknown."""
    if dtype is None:
        return 0
    found = _DTYPES.get(dtype)
    if found is None:
        try:
            found = int(dtype) if isinstance(dtype, int) else onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        except (TypeError, ValueError, KeyError):
            found = 0
        _DTYPES[dtype] = found
    return found
