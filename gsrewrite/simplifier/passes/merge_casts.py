"""``merge-casts``: ``Cast(Cast(x, B), C)`` becomes ``Cast(x, C)`` when that is exact.

With ``x`` of type A the merge is exact when A -> B loses nothing (every A value is a B value) and the
second cast then treats the values like a direct A -> C cast would: A and B are the same kind (both
integers, both floats), or A -> C is lossless too. ``float -> int64 -> float`` (truncation) or
``float32 -> float16 -> float32`` (rounding) are never merged. When C is A the pair is bypassed.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from gsrewrite.graph.rewiring import disconnect_if_unused, drop_disconnected, forward, is_standard, np_dtype
from gsrewrite.simplifier.passes.base import SimplifyPass


class MergeCasts(SimplifyPass):
    name = "merge-casts"
    description = "Merge consecutive Casts when the intermediate type is lossless (exact)."

    def apply(self, graph: gs.Graph) -> int:
        count = 0
        for node in graph.nodes:
            first = _cast_input(node)
            if first is None:
                continue
            a, b, c = np_dtype(first.inputs[0]), _target(first), _target(node)
            if a is None or b is None or c is None or not exact_chain(a, b, c):
                continue
            node.inputs[0] = first.inputs[0]
            disconnect_if_unused(first, graph)
            count += 1
            if a == c:
                forward(graph, node, node.inputs[0], node.outputs[0])
        if count:
            drop_disconnected(graph)
        return count


def _cast_input(node: gs.Node) -> gs.Node | None:
    if node.op != "Cast" or not is_standard(node) or not node.outputs:
        return None
    src = node.inputs[0]
    first = src.inputs[0] if isinstance(src, gs.Variable) and src.inputs else None
    return first if first is not None and first.op == "Cast" and is_standard(first) else None


def _target(node: gs.Node) -> np.dtype | None:
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attrs["to"])))
    except (KeyError, TypeError, ValueError):
        return None
    return dtype if dtype.kind in "biuf" and not dtype.names else None


def lossless(src: np.dtype, dst: np.dtype) -> bool:
    """Every value of ``src`` is exactly a value of ``dst``."""
    if src == dst:
        return True
    if src.kind in "iu" and dst.kind == "f":  # numpy calls int64 -> float64 safe; it is not exact
        return np.finfo(dst).nmant + 1 >= src.itemsize * 8 - (src.kind == "i")
    return bool(np.can_cast(src, dst, "safe"))


def exact_chain(a: np.dtype, b: np.dtype, c: np.dtype) -> bool:
    """``Cast(Cast(x: a, b), c)`` equals ``Cast(x, c)`` for every x."""
    if not lossless(a, b):
        return False
    same_kind = (a.kind == "f") == (b.kind == "f")
    return same_kind or lossless(a, c)
