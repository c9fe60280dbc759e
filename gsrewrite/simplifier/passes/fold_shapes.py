"""``fold-shapes``: shape subgraphs (``Shape -> Gather/Slice -> Unsqueeze -> Concat -> Reshape``) folded.

With the symbolic values of :mod:`gsrewrite.simplifier.symbolic` (dims as :mod:`gsrewrite.shapes.symdim` expressions):

1. a shape tensor whose value is static (every dim it reads is known) becomes a constant, even when the
   tensor it measures has dynamic dims elsewhere;
2. a Reshape target becomes a constant when every entry is static, is the input's own dim at the same
   position (written ``0``; ``allowzero`` is then cleared, which changes nothing when no entry is a
   literal 0), or is the single remaining entry (written ``-1``);
3. an Expand target becomes a constant when every entry is static or the input's own dim (written ``1``);
4. otherwise a Reshape target made of static and symbolic dims is rebuilt from the fewest nodes — one
   ``Shape`` (with ``start``/``end``, or ``Shape`` + ``Gather`` before opset 15) per run of dims read
   from one tensor (a graph input when the dim is named), plus a ``Concat`` — when that removes more nodes
   than it adds.

Dynamic dims stay dynamic (nothing is assumed about their sizes) and keep their names; fix them with
``--input-shape`` to fold further.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import NameSource
from gsrewrite.graph.rewiring import ConstantPool, is_standard
from gsrewrite.shapes.symdim import DimValue
from gsrewrite.simplifier.passes.base import SimplifyPass
from gsrewrite.simplifier.shape_builder import ShapeBuilder
from gsrewrite.simplifier.symbolic import Element, ShapeValues, SymValue, dim_of, named, propagate, readable


class FoldShapes(SimplifyPass):
    name = "fold-shapes"
    description = ("Fold Shape->Gather/Slice->Concat->Reshape chains: static dims become constants, Reshape "
                   "targets use 0/-1 for dynamic dims, the rest is rebuilt with fewer nodes.")

    def apply(self, graph: gs.Graph) -> int:
        values = propagate(graph)
        if not values:
            return 0
        names = NameSource(graph)
        pool = ConstantPool(names, graph)
        count = _static_tensors(graph, values, pool)
        requests = []
        for node in list(graph.nodes):
            target = _target(node, values)
            if target is None:
                continue
            if all(isinstance(e, int) for e in target):
                node.inputs[1] = pool.get(np.array(target, dtype=np.int64), f"{node.name or node.op}_shape")
                _after_rewrite(node, target)
                count += 1
            else:
                requests.append((node, 1, target))
        if requests:
            count += _rebuild(graph, pool, names, values, requests)
        return count


def _rebuild(graph: gs.Graph, pool: ConstantPool, names: NameSource, values: ShapeValues,
             requests: list[tuple[gs.Node, int, list[DimValue]]]) -> int:
    builder = ShapeBuilder(graph, pool, names, values)
    before = {id(node): node.inputs[1] for node, _, _ in requests}
    count = builder.rebuild_all(requests)
    for node, _, target in requests:
        if node.inputs[1] is not before[id(node)]:
            _after_rewrite(node, target)
    builder.finish()
    return count


def _target(node: gs.Node, values: ShapeValues) -> list[DimValue] | None:
    """The new target of a Reshape/Expand whose target is computed at run time, when known: ints and dims a
    ``Shape`` can read."""
    if not is_standard(node) or node.op not in _TARGETS or len(node.inputs) < 2 \
            or isinstance(node.inputs[1], gs.Constant):
        return None
    value = values.get(node.inputs[1])
    return _TARGETS[node.op](node, value) if value is not None and not value.scalar else None


def _after_rewrite(node: gs.Node, target: list[DimValue]) -> None:
    if node.op != "Reshape":
        return
    if 0 in target and node.attrs.get("allowzero", 0):
        node.attrs["allowzero"] = 0  # the zeros written are "keep the input's dim"
    _refine_shape(node.outputs[0], node.inputs[0], target)


def _static_tensors(graph: gs.Graph, values: ShapeValues, pool: ConstantPool) -> int:
    """Replace every read of a shape tensor whose value is static by a constant."""
    count = 0
    protected = {id(t) for t in graph.outputs}
    for node in graph.nodes:
        if len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        value = values.get(out)
        if value is None or not value.static or id(out) in protected or not out.outputs or not _fits(value, out):
            continue
        array = np.array(value.elements, dtype=np.dtype(out.dtype))
        const = pool.get(array.reshape(()) if value.scalar else array, out.name)
        for reader in list(out.outputs):
            for i, tensor in enumerate(reader.inputs):
                if tensor is out:
                    reader.inputs[i] = const
        count += 1
    return count


def _fits(value: SymValue, out: gs.Tensor) -> bool:
    """True when every element of ``value`` is representable in ``out``'s integer dtype."""
    if out.dtype is None or np.dtype(out.dtype).kind not in "biu":
        return False
    if np.dtype(out.dtype).kind == "b":
        return all(e in (0, 1) for e in value.elements)
    info = np.iinfo(np.dtype(out.dtype))
    return all(info.min <= e <= info.max for e in value.elements)  # type: ignore[operator]


def _own_dim(element: Element, x: gs.Tensor, axis: int) -> bool:
    """True when ``element`` is provably dim ``axis`` of ``x`` (not a static size)."""
    if x.shape is None or axis >= len(x.shape) or element is None or isinstance(element, int):
        return False
    return dim_of(x, axis) == element


def _known(element: Element) -> bool:
    """An int, or a dim a ``Shape`` can read; anything else (an expression, untracked) is left to ``-1``."""
    return isinstance(element, int) or readable(element)


def _reshape_target(node: gs.Node, value: SymValue) -> list[DimValue] | None:
    """The Reshape target with the input's own dims as ``0`` and one unknown entry as ``-1``."""
    x = node.inputs[0]
    if node.attrs.get("allowzero", 0) and 0 in value.elements:
        return None  # literal zeros: the input's dims cannot be written as 0
    target: list[Element] = [0 if _own_dim(e, x, axis) else e for axis, e in enumerate(value.elements)]
    unknown = [i for i, e in enumerate(target) if not _known(e)]
    if len(unknown) > 1 or (unknown and -1 in [e for e in target if isinstance(e, int)]):
        return None
    if not unknown and not all(isinstance(e, int) for e in target):
        unresolved = [i for i, e in enumerate(target) if not isinstance(e, int)]
        if len(unresolved) == 1 and -1 not in [e for e in target if isinstance(e, int)]:
            unknown = unresolved  # the only dim not known statically: Reshape infers it
    return [-1 if i in unknown else e for i, e in enumerate(target)]  # type: ignore[misc]


def _refine_shape(out: gs.Tensor, x: gs.Tensor, target: list[DimValue]) -> None:
    """Give a Reshape output the shape its new target implies when inference could not tell (the
    target was computed at run time), so that later passes see its rank and dims."""
    if out.shape is not None and all(d is not None for d in out.shape):
        return
    dims: list[int | str | None] = []
    for axis, element in enumerate(target):
        if element == 0 and x.shape is not None and axis < len(x.shape):
            dims.append(x.shape[axis])
        elif isinstance(element, int) and element > 0:
            dims.append(element)
        elif named(element) is not None:
            dims.append(named(element))
        else:
            dims.append(None)
    if out.shape is not None and len(out.shape) == len(dims):
        dims = [known if known is not None else mine for known, mine in zip(out.shape, dims, strict=True)]
    out.shape = dims


def _expand_target(node: gs.Node, value: SymValue) -> list[DimValue] | None:
    """The Expand target with the input's own dims as ``1`` (broadcasting keeps them)."""
    x = node.inputs[0]
    if x.shape is None or not all(_known(e) for e in value.elements):
        return None
    offset = len(value.elements) - len(x.shape)
    known = [e for e in value.elements if e is not None]  # all of them (checked above)
    return [1 if i >= offset and _own_dim(e, x, i - offset) else e for i, e in enumerate(known)]


_TARGETS = {"Reshape": _reshape_target, "Expand": _expand_target}
