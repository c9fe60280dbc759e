"""Output types of the onnxruntime contrib ops that replacements create, for tensors nobody typed yet.

ONNX shape inference does not know ``com.microsoft`` ops, and a replacement's new intermediate tensors start
untyped: a later pattern of the same rewrite (``linear-3d`` reading an attention output) would then see an
unknown shape and could not prove anything. These rules give the outputs what onnxruntime's own schemas say,
from the inputs' known types; an output whose rule cannot tell (an input's shape unknown) stays untyped.
Only untyped outputs are filled in: a type the graph already has is never changed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_graphsurgeon as gs

Shape = list[int | str | None]
#: op -> rule(node) -> one (dtype, shape) per output (None where unknown)
_Rule = Callable[[gs.Node], list[tuple[object, Shape | None] | None]]


def annotate(node: gs.Node) -> None:
    """Fill in the dtype and shape of ``node``'s untyped outputs where its op's rule knows them."""
    if node.domain != "com.microsoft" or node.op not in _RULES:
        return
    for tensor, known in zip(node.outputs, _RULES[node.op](node), strict=False):
        if known is None or not isinstance(tensor, gs.Variable) or not tensor.name:
            continue
        dtype, shape = known
        if tensor.dtype is None and dtype is not None:
            tensor.dtype = dtype
        if tensor.shape is None and shape is not None:
            tensor.shape = list(shape)


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
    if q is None or len(q) != 3 or len(node.inputs) < 3 or not node.inputs[1].name:
        return [None]  # packed QKV: the output hidden size is not the input's
    return [(node.inputs[0].dtype, q)]


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
    **{op: _like_input for op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                                  "SimplifiedLayerNormalization", "FastGelu", "BiasGelu", "Gelu", "QuickGelu",
                                  "RotaryEmbedding")},
}
