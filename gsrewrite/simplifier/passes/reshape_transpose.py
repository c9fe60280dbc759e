"""``merge-reshape-transpose``: ``Reshape -> Transpose -> Reshape`` that only regroups dims is one Transpose.

The dynamo exporter writes ``k.transpose(-2, -1)`` of a 4-D tensor as: merge the leading dims
(``Reshape(k, [-1, seq, d])``), swap the last two (``Transpose(perm=[0, 2, 1])``), split the merged dim
again (``Reshape(., [batch, heads, d, seq])``), with the targets computed from ``Shape(k)``. When

1. the first Reshape merges contiguous runs of the input's dims (each entry is one input dim, a product
   of static dims, or the single ``-1``/unknown entry that takes the rest),
2. the Transpose permutes those groups, and
3. the second Reshape lists exactly the input's dims in the permuted group order,

the three nodes compute ``Transpose(x, perm)`` with ``perm`` the groups' dims in their new order. Dims are
compared symbolically (:mod:`gsrewrite.simplifier.symbolic`), so this works with dynamic batch and sequence
sizes. The intermediate tensors must have no other reader.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from gsrewrite.graph.rewiring import constant_ints, disconnect, drop_disconnected, is_standard, sole_reader
from gsrewrite.simplifier.passes.base import SimplifyPass
from gsrewrite.simplifier.symbolic import Element, ShapeValues, SymValue, dim_of, propagate, readable

_REST = "rest"  # the -1 (or unknown) entry of the first Reshape


class MergeReshapeTranspose(SimplifyPass):
    name = "merge-reshape-transpose"
    description = "Turn Reshape -> Transpose -> Reshape that only regroups dims into one Transpose."

    def apply(self, graph: gs.Graph) -> int:
        values: ShapeValues | None = None
        count = 0
        for node in graph.nodes:
            chain = _chain(node, graph)
            if chain is None:
                continue
            values = values if values is not None else propagate(graph)
            perm = _single_transpose(*chain, values)
            if perm is None:
                continue
            first, transpose, _ = chain
            x = first.inputs[0]
            disconnect(first)
            disconnect(transpose)
            node.op, node.attrs = "Transpose", {"perm": perm}
            node.inputs.clear()
            node.inputs.append(x)
            count += 1
        if count:
            drop_disconnected(graph)
        return count


def _chain(node: gs.Node, graph: gs.Graph) -> tuple[gs.Node, gs.Node, gs.Node] | None:
    """``(first Reshape, Transpose, second Reshape)`` ending at ``node``, intermediates read only here."""
    if node.op != "Reshape" or not is_standard(node) or len(node.inputs) < 2:
        return None
    transpose = _producer(node.inputs[0], "Transpose")
    if transpose is None or not sole_reader(node.inputs[0], node, graph):
        return None
    first = _producer(transpose.inputs[0], "Reshape")
    if first is None or not sole_reader(transpose.inputs[0], transpose, graph) or len(first.inputs) < 2:
        return None
    return first, transpose, node


def _producer(tensor: gs.Tensor, op: str) -> gs.Node | None:
    node = tensor.inputs[0] if isinstance(tensor, gs.Variable) and tensor.inputs else None
    return node if node is not None and node.op == op and is_standard(node) and len(node.outputs) == 1 else None


def _single_transpose(first: gs.Node, transpose: gs.Node, second: gs.Node,
                      values: ShapeValues) -> list[int] | None:
    x = first.inputs[0]
    if x.shape is None:
        return None
    dims: list[Element] = [dim_of(x, i) for i in range(len(x.shape))]
    groups = _groups(dims, _target(first, values, dims))
    if groups is None:
        return None
    perm = transpose.attrs.get("perm", list(reversed(range(len(groups)))))
    if sorted(perm) != list(range(len(groups))):
        return None
    order = [groups[p] for p in perm]
    expected = [dims[i] for group in order for i in group]
    target = _target(second, values, [dims[g[0]] if len(g) == 1 else None for g in order])
    if target is None or len(target) != len(expected):
        return None
    if not all(_same(e, t) or t == _REST for e, t in zip(expected, target, strict=True)):
        return None
    return [i for group in order for i in group]


def _target(node: gs.Node, values: ShapeValues, dims: list[Element]) -> list[Element] | None:
    """A Reshape's target with ``0`` resolved against ``dims`` (the input's dims, None where unknown); an entry
    that is neither an int nor one dim (untracked, an expression) is the one that takes the rest."""
    shape = node.inputs[1]
    value = values.get(shape)
    if value is None and isinstance(shape, gs.Constant):
        ints = constant_ints(shape)
        value = SymValue(tuple(ints)) if ints is not None else None
    if value is None or value.scalar:
        return None
    zero_copies = not node.attrs.get("allowzero", 0)
    out: list[Element] = []
    for i, e in enumerate(value.elements):
        if e == 0 and zero_copies:
            e = dims[i] if i < len(dims) else None
            if e is None:
                return None
        out.append(_REST if e == -1 or not (isinstance(e, int) or readable(e)) else e)  # type: ignore[arg-type]
    return out if out.count(_REST) <= 1 else None  # type: ignore[arg-type]


def _groups(dims: list[Element], target: list[Element] | None) -> list[list[int]] | None:
    """The input dims each target entry merges (contiguous runs), or None if it is not a pure merge."""
    if target is None:
        return None
    if _REST not in target:
        groups = _match(dims, target)
        return groups if groups is not None and sum(len(g) for g in groups) == len(dims) else None
    cut = target.index(_REST)  # type: ignore[arg-type]  # _REST marks the -1 entry among the elements
    left = _match(dims, target[:cut])
    right = _match(list(reversed(dims)), list(reversed(target[cut + 1:])))
    if left is None or right is None:
        return None
    used_left = sum(len(g) for g in left)
    used_right = sum(len(g) for g in right)
    rest = list(range(used_left, len(dims) - used_right))
    if not rest or used_left + used_right > len(dims):
        return None
    right = [[len(dims) - 1 - i for i in reversed(g)] for g in reversed(right)]
    return [*left, rest, *right]


def _match(dims: list[Element], target: list[Element]) -> list[list[int]] | None:
    """Groups of leading ``dims`` matching ``target`` entry by entry (a dim, or a product of static dims)."""
    groups: list[list[int]] = []
    i = 0
    for entry in target:
        if i < len(dims) and _same(dims[i], entry):
            groups.append([i])
            i += 1
            continue
        group, product = [], 1
        while isinstance(entry, int) and i < len(dims) and product < entry:
            dim = dims[i]
            if not isinstance(dim, int):
                break
            product *= dim
            group.append(i)
            i += 1
        if not group or product != entry:
            return None
        groups.append(group)
    return groups


def _same(a: Element, b: Element) -> bool:
    return a is not None and b is not None and a == b

