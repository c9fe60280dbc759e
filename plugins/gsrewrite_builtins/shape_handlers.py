"""Built-in shape handlers: output types of the onnxruntime contrib ops gsrewrite emits, through the
``gsrewrite_infer_shape`` hook like any plugin's.

ONNX shape inference does not know ``com.microsoft`` ops; the one shape-inference entry point
(:mod:`gsrewrite.shapes.handlers`) asks the handlers for them, on import and for a replacement's new nodes (a later
pattern of the same rewrite, ``linear-3d`` reading an attention output, needs the shape to prove anything).
These rules give what onnxruntime's own schemas say, from the inputs' known types; an output whose rule cannot
tell (an input's shape unknown) stays untyped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import hookimpl

Shape = list[int | str | None]
#: op -> rule(node) -> one (dtype, shape) per output (None where unknown)
_Rule = Callable[[gs.Node], list[tuple[object, Shape | None] | None]]


@hookimpl
def gsrewrite_infer_shape(node: gs.Node, context: Any) -> list[tuple[object, Shape | None] | None] | None:
    """One ``(dtype, shape)`` (or None when unknown) per output of the contrib ops below, else None."""
    if node.domain != "com.microsoft" or node.op not in _RULES:
        return None
    return _RULES[node.op](node)


def _input_shape(node: gs.Node, index: int) -> Shape | None:
    if index >= len(node.inputs) or node.inputs[index].shape is None:
        return None
    return list(node.inputs[index].shape)


def _like_input(node: gs.Node) -> list[tuple[object, Shape | None] | None]:
    """Elementwise ops and normalizations: the first input's type (SkipLayerNormalization's sum too)."""
    typed = (node.inputs[0].dtype, _input_shape(node, 0))
    return [typed, None, None, typed]


def _attention(node: gs.Node) -> list[tuple[object, Shape | None] | None]:
    """Attention: [batch, sequence, V hidden], V hidden = qkv_hidden_sizes[2] or a third of the packed weight."""
    x, weight = _input_shape(node, 0), _input_shape(node, 1)
    sizes = node.attrs.get("qkv_hidden_sizes")
    hidden = int(sizes[2]) if sizes else (weight[1] // 3 if weight and isinstance(weight[1], int) else None)
    if x is None or len(x) != 3 or hidden is None:
        return [None]
    return [(node.inputs[0].dtype, [x[0], x[1], hidden])]


def _multi_head(node: gs.Node) -> list[tuple[object, Shape | None] | None]:
    """MultiHeadAttention on 3-D Q/K/V: [batch, sequence, V hidden]."""
    q, v = _input_shape(node, 0), _input_shape(node, 2)
    if q is None or v is None or len(q) != 3 or len(v) != 3:
        return [None]
    return [(node.inputs[0].dtype, [q[0], q[1], v[2]])]


def _group_query(node: gs.Node) -> list[tuple[object, Shape | None] | None]:
    """GroupQueryAttention on an unpacked 3-D query: the query's shape."""
    q = _input_shape(node, 0)
    if q is None or len(q) != 3:
        return [None]
    if len(node.inputs) < 3 or not node.inputs[1].name:  # packed QKV: [B, S, (N + 2 * kv_N) * H]
        heads, kv_heads = int(node.attrs.get("num_heads", 0)), int(node.attrs.get("kv_num_heads", 0))
        width = q[2]
        if not heads or not kv_heads or width is None or isinstance(width, str):
            return [None]
        return [(node.inputs[0].dtype, [q[0], q[1], width * heads // (heads + 2 * kv_heads)])]
    return [(node.inputs[0].dtype, q)]


def _matmul_nbits(node: gs.Node) -> list[tuple[object, Shape | None] | None]:
    """MatMulNBits: A [..., K] times the packed [N, K] weight: [..., N] in A's type."""
    a, n = _input_shape(node, 0), node.attrs.get("N")
    if a is None or not a or not isinstance(n, int):
        return [None]
    return [(node.inputs[0].dtype, [*a[:-1], n])]


def _embed_layernorm(node: gs.Node) -> list[tuple[object, Shape | None] | None]:
    """EmbedLayerNormalization: [batch, sequence, hidden] and a [batch] mask index."""
    ids, table = _input_shape(node, 0), _input_shape(node, 2)
    if ids is None or table is None or len(ids) != 2 or len(table) != 2:
        return [None, None]
    return [(node.inputs[2].dtype, [ids[0], ids[1], table[1]]), (np.dtype(np.int32), [ids[0]])]


_RULES: dict[str, _Rule] = {
    "Attention": _attention,
    "MultiHeadAttention": _multi_head,
    "GroupQueryAttention": _group_query,
    "EmbedLayerNormalization": _embed_layernorm,
    "MatMulNBits": _matmul_nbits,
    **{op: _like_input for op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                                  "SimplifiedLayerNormalization", "FastGelu", "BiasGelu", "Gelu", "QuickGelu",
                                  "RotaryEmbedding")},
}
