"""Named check and computations of the attention patterns: head count and softmax scale from the graph.

num_heads is never asked from the user: it comes from the head reshape of Q ([B, S, H, dh]), whose target
shape is a constant or a Concat of computed dims and constants (``-1`` resolved with the hidden size), or from
shapes that inference already knows. The scale comes from the constant the matched form multiplies or
divides by (labels in mha.toml tell which form matched).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import CheckFailed, Match, constant_values, reads


@reads("k_lin", "mask", "q_lin", "v_lin")
def attention_inputs(match: Match) -> str | None:
    """Q, K, V projections are 3-D [B, S, D] (when known) and the mask, if any, is float of rank <= 4."""
    for name in ("q_lin", "k_lin", "v_lin"):
        shape = match.shape(name)
        if shape is not None and len(shape) != 3:
            return f"{name} has rank {len(shape)}, attention fusion needs [batch, sequence, hidden]"
    mask = match.tensor("mask")
    if mask is not None:
        dtype = match.dtype("mask")
        if dtype is not None and dtype.kind != "f":
            return f"the additive mask has dtype {dtype}, not float"
        shape = match.shape("mask")
        if shape is not None and len(shape) > 4:
            return f"the mask has rank {len(shape)}"
    return None


@reads("out")
def attention_output_3d(match: Match) -> str | None:
    """The context is reshaped back to [B, S, D] (what the fused op outputs)."""
    rank = _output_rank(match)
    return None if rank == 3 else f"the context is reshaped to rank {rank if rank else 'unknown'}, not 3"


@reads("so")
def attention_flat_output(match: Match) -> str | None:
    """The context is flattened by a constant 2-D target shape (e.g. [-1, D] before a Gemm)."""
    target = match.constant("so")
    if target is None or target.size != 2:
        return "the context is not flattened to 2-D by a constant shape"
    return None


@reads("k4", "past_k", "past_v", "q", "v4")
def attention_cache(match: Match) -> str | None:
    """The past K/V are [B, H, P, dh] caches of the new heads (same heads and head size as Q: MultiHeadAttention
    appends the new K/V and returns the present)."""
    q = match.shape("q")
    for name, new in (("past_k", "k4"), ("past_v", "v4")):
        past, heads = match.shape(name), match.shape(new)
        if past is None or len(past) != 4 or heads is None or len(heads) != 4:
            return f"{name} has shape {past}, not a [batch, heads, past_sequence, head_size] cache"
        if past[1] != heads[1] or past[3] != heads[3] or not isinstance(past[1], int):
            return f"{name} {past} does not hold the heads of the new {new} {heads}"
        if q is not None and len(q) == 4 and q[1] != heads[1]:
            return f"K/V have {heads[1]} heads and Q {q[1]}: grouped-query attention, not multi-head"
    return None


def _output_rank(match: Match) -> int | None:
    shape = match.shape("out")
    if shape is not None:
        return len(shape)
    parts = _shape_parts(match.tensor("so"))
    return len(parts) if parts is not None else None


@reads("q3", "q_lin", "sq")
def attention_num_heads(match: Match) -> int:
    """The number of heads of the Q reshape [B, S, H, dh]."""
    heads, head_size = _reshape_dims(match, "sq", "q3")
    hidden = _hidden_size(match)
    if (heads is None or heads <= 0) and head_size and head_size > 0 and hidden:
        heads = hidden // head_size
    if heads is None or heads <= 0:
        raise CheckFailed("cannot tell the number of heads from the Q reshape")
    if hidden and hidden % heads:
        raise CheckFailed(f"hidden size {hidden} is not a multiple of {heads} heads")
    return int(heads)


@reads("c", "scores/div", "scores/div_q", "scores/mul", "scores/mul_k")
def attention_scale(match: Match) -> float:
    """The softmax scale: 1/c for a Div form, c for a Mul form, c*c when split onto Q and K, else 1."""
    c = match.constant("c")
    value = float(np.asarray(c).reshape(-1)[0]) if c is not None else None
    if c is not None and np.asarray(c).size > 1 and not np.all(np.asarray(c) == value):
        raise CheckFailed("the scale is not a single value")
    forms = {"scores/div": lambda v: 1.0 / v, "scores/div_q": lambda v: 1.0 / v, "scores/mul": lambda v: v,
             "scores/mul_k": lambda v: v * v}
    for label, scale in forms.items():
        if match.node(label) is not None:
            if value is None or value == 0.0:
                raise CheckFailed("the scale constant is missing or zero")
            return float(scale(value))
    return 1.0


@reads("k4", "q4", "v4")
def attention_heads_inputs(match: Match) -> str | None:
    """Q, K and V are [B, H, S, dh] with the same known H and dh (K may be a [B, Hkv, rep, L, dh] expansion of
    Hkv x rep = H heads): the head counts follow from the shapes. K/V of one head under Q of several (multi-query
    attention, broadcast by the MatMuls) are ``mqa-4d``'s."""
    found = _head_counts(match)
    if isinstance(found, str):
        return found
    (heads, size), (k_heads, k_size), (v_heads, v_size) = found
    if (k_heads, v_heads) == (1, 1) and heads > 1:
        return f"K and V have 1 head for {heads} Q heads: multi-query attention (mqa-4d), not multi-head"
    if k_heads != heads or v_heads != heads or k_size != size or v_size != size:
        return (f"{heads} Q heads of size {size} do not match K's {k_heads} of size {k_size} and V's {v_heads} of "
                f"size {v_size}")
    return None


@reads("k4", "q4", "v4")
def multi_query_inputs(match: Match) -> str | None:
    """Q is [B, H, S, dh] with H > 1, K and V are [B, 1, L, dh]: one KV head shared by every Q head (Falcon's
    multi-query attention; the MatMuls broadcast it), known from the shapes."""
    found = _head_counts(match)
    if isinstance(found, str):
        return found
    (heads, size), (k_heads, k_size), (v_heads, v_size) = found
    if (k_heads, v_heads) != (1, 1) or heads <= 1 or len(match.shape("k4") or ()) != 4:
        return f"K and V have {k_heads} and {v_heads} heads for {heads} Q heads: not multi-query attention"
    if k_size != size or v_size != size:
        return f"head sizes differ: Q {size}, K {k_size}, V {v_size}"
    return None


@reads("q4")
def multi_query_repeats(match: Match) -> np.ndarray:
    """The Expand target that repeats the one KV head [B, 1, L, dh] for every Q head: [1, H, 1, 1]."""
    found = query_heads(match)
    if found is None:
        raise CheckFailed("cannot tell the number of heads of Q")
    return np.array([1, found[0], 1, 1], dtype=np.int64)


@reads("cap", "cap2")
def softcap_constants(match: Match) -> str | None:
    """The soft-cap divides and multiplies by one positive finite value (``cap * tanh(s / cap)``)."""
    values = [match.constant(name) for name in ("cap", "cap2")]
    if any(v is None or v.size != 1 for v in values):
        return "the soft-cap is not a single constant"
    first, second = (float(np.asarray(v).reshape(-1)[0]) for v in values)
    if not (np.isfinite(first) and first > 0) or first != second:
        return f"the scores are divided by {first:g} and multiplied by {second:g}: not a soft-cap"
    return None


def _head_counts(match: Match) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]] | str:
    """(heads, head size) of Q, K and V from their shapes (K of rank 5: Hkv x rep heads), or why not known."""
    q = match.shape("q4")
    heads = query_heads(match)
    if q is None or len(q) != 4 or heads is None:
        return f"Q has shape {q}: not [batch, heads, sequence, head_size] with a known head count and size"
    counts = []
    for name, label in (("k4", "K"), ("v4", "V")):
        shape = match.shape(name)
        ranks = (4, 5) if name == "k4" else (4,)
        if shape is None or len(shape) not in ranks:
            return f"{label} has shape {shape}, not split into heads"
        lead = shape[1:-2]  # [H] or [Hkv, rep]
        if not all(isinstance(d, int) and d > 0 for d in lead) or not isinstance(shape[-1], int):
            return f"{label} has shape {shape}: its head count and size do not follow from the shapes"
        counts.append((int(np.prod(lead)), int(shape[-1])))
    return (heads, counts[0], counts[1])


@reads("q4")
def attention_heads_from_q(match: Match) -> int:
    """The number of heads of Q in [B, H, S, dh]."""
    found = query_heads(match)
    if found is None:
        raise CheckFailed("cannot tell the number of heads of Q")
    return found[0]


@reads("q4")
def attention_kv_shape(match: Match) -> np.ndarray:
    """A Reshape target that brings K to [B, H, L, dh] (also from a [B, Hkv, rep, L, dh] expansion)."""
    found = query_heads(match)
    if found is None:
        raise CheckFailed("cannot tell the number of heads of Q")
    return np.array([0, found[0], -1, found[1]], dtype=np.int64)


def query_heads(match: Match) -> tuple[int, int] | None:
    """(H, dh) of Q [B, H, S, dh]: from inferred shapes, else from the head reshape upstream of Q (through
    rotary arithmetic and the head transpose), with -1 resolved by the projection's hidden size."""
    shape = match.shape("q4")
    if shape is not None and len(shape) == 4 and isinstance(shape[1], int) and isinstance(shape[3], int):
        return shape[1], shape[3]
    tensor, steps = match.tensor("q4"), 0
    while tensor is not None and tensor.inputs and steps < 8:
        node = tensor.inputs[0]
        if node.op == "Reshape":
            return _heads_of_reshape(node)
        if node.op not in _KEEP_HEADS:  # a Slice or Gather of the heads (Falcon's fused QKV) changes the count
            return None
        tensor = next((t for t in node.inputs if not isinstance(t, gs.Constant) and t.inputs), None)
        steps += 1
    return None


#: ops between Q's head reshape and the attention that keep its head count (rotary's arithmetic, the head
#: transpose, casts); the walk up from Q stops at anything else
_KEEP_HEADS = frozenset({"Add", "Sub", "Mul", "Div", "Neg", "Transpose", "Cast", "Identity",
                         "RotaryEmbedding"})


def _heads_of_reshape(node: gs.Node) -> tuple[int, int] | None:
    parts = _shape_parts(node.inputs[1]) if len(node.inputs) > 1 else None
    if parts is None or len(parts) != 4 or not isinstance(parts[3], int) or parts[3] <= 0:
        return None
    heads, head_size = parts[2], parts[3]
    if isinstance(heads, int) and heads > 0:
        return heads, head_size
    hidden = _hidden_of(node.inputs[0])
    return (hidden // head_size, head_size) if hidden and hidden % head_size == 0 else None


@reads("s")
def attention_scores(match: Match) -> str | None:
    """``s`` is Q K^T: a MatMul, possibly scaled by a constant (Mul or Div)."""
    tensor = match.tensor("s")
    node = tensor.inputs[0] if tensor is not None and tensor.inputs else None
    if node is not None and node.op in ("Mul", "Div"):
        operands = [t for t in node.inputs if not isinstance(t, gs.Constant)]
        node = operands[0].inputs[0] if len(operands) == 1 and operands[0].inputs else None
    if node is None or node.op != "MatMul":
        return "the first operand is not attention scores (a MatMul, possibly scaled)"
    return None


def _reshape_dims(match: Match, shape_name: str, output_name: str) -> tuple[int | None, int | None]:
    """(H, dh) of a [B, S, H, dh] head reshape, each None when unknown and -1 when inferred."""
    out = match.shape(output_name)
    if out is not None and len(out) == 4 and isinstance(out[2], int) and isinstance(out[3], int):
        return out[2], out[3]
    parts = _shape_parts(match.tensor(shape_name))
    if parts is None or len(parts) != 4:
        return None, None
    return parts[2], parts[3]


def _shape_parts(tensor: gs.Tensor | None) -> list[int | None] | None:
    """The values of a 1-D shape tensor: a constant, or a Concat whose constant parts are known."""
    if tensor is None:
        return None
    if isinstance(tensor, gs.Constant):
        return [int(v) for v in constant_values(tensor).reshape(-1)]
    node = tensor.inputs[0] if tensor.inputs else None
    if node is None or node.op != "Concat":
        return None
    parts: list[int | None] = []
    for piece in node.inputs:
        if isinstance(piece, gs.Constant):
            parts.extend(int(v) for v in constant_values(piece).reshape(-1))
        elif piece.shape is not None and len(piece.shape) == 1 and isinstance(piece.shape[0], int):
            parts.extend([None] * piece.shape[0])
        else:
            parts.append(None)  # most shape pieces are single dims (Unsqueeze of a gathered dim)
    return parts


def _hidden_size(match: Match) -> int | None:
    return _hidden_of(match.tensor("q_lin"))


def _hidden_of(tensor: gs.Tensor | None) -> int | None:
    """The last dim of a projection output: inferred, else the width of the weight that produced it."""
    if tensor is not None and tensor.shape is not None and tensor.shape and isinstance(tensor.shape[-1], int):
        return int(tensor.shape[-1])
    seen = 0
    while tensor is not None and tensor.inputs and seen < 4:  # through the bias Add to the weight
        node = tensor.inputs[0]
        for operand in node.inputs:
            if isinstance(operand, gs.Constant) and operand.shape is not None and len(operand.shape) == 2:
                return int(operand.shape[-1])
        tensor = next((t for t in node.inputs if not isinstance(t, gs.Constant)), None)
        seen += 1
    return None


CHECKS: dict[str, Callable[[Match], str | None]] = {
    "attention_inputs": attention_inputs,
    "attention_output_3d": attention_output_3d,
    "attention_flat_output": attention_flat_output,
    "attention_scores": attention_scores,
    "attention_heads_inputs": attention_heads_inputs,
    "attention_cache": attention_cache,
    "multi_query_inputs": multi_query_inputs,
    "softcap_constants": softcap_constants,
}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {
    "attention_num_heads": attention_num_heads,
    "attention_scale": attention_scale,
    "attention_heads_from_q": attention_heads_from_q,
    "attention_kv_shape": attention_kv_shape,
    "multi_query_repeats": multi_query_repeats,
}


@reads("wk", "wq", "wv", "x")
def packable_projections(match: Match) -> str | None:
    """Three [D, Dq] projection weights of one 3-D input with the same output width (self-attention)."""
    weights = [match.constant(w) for w in ("wq", "wk", "wv")]
    if any(w is None or w.ndim != 2 for w in weights):
        return "the projection weights are not constant matrices"
    if len({w.shape for w in weights}) != 1:
        return f"projection shapes differ: {[list(w.shape) for w in weights]}"
    shape = match.shape("x")
    if shape is not None and len(shape) != 3:
        return f"the attention input has rank {len(shape)}, Attention needs [batch, sequence, hidden]"
    return None


@reads("wk", "wq", "wv")
def packed_qkv_weight(match: Match) -> np.ndarray:
    """[D, 3 Dq]: the three projection weights side by side."""
    return np.concatenate([match.constant(w) for w in ("wq", "wk", "wv")], axis=1)


@reads("bk", "bq", "bv", "wq")
def packed_qkv_bias(match: Match) -> np.ndarray:
    """[3 Dq]: the three biases (zeros for a projection without one)."""
    width = match.constant("wq").shape[1]
    dtype = match.constant("wq").dtype
    parts = [match.constant(b) for b in ("bq", "bk", "bv")]
    return np.concatenate([p.reshape(-1).astype(dtype) if p is not None else np.zeros(width, dtype) for p in parts])


@reads("b", "split", "w", "x")
def even_qkv_split(match: Match) -> str | None:
    """The Split cuts the packed projection into three equal parts, and the 3-D input feeds it unchanged."""
    node, weight = match.node("split"), match.constant("w")
    if node is None or weight is None or weight.ndim != 2 or weight.shape[1] % 3:
        return "the projection weight is not a constant [D, 3 D] matrix"
    sizes = node.attrs.get("split")
    if sizes is not None and len(set(int(s) for s in sizes)) != 1:
        return f"the split sizes {list(sizes)} are not equal"
    bias = match.constant("b")
    if bias is None or bias.shape != (weight.shape[1],):
        found = list(bias.shape) if bias is not None else None
        return f"the projection bias has shape {found}, not [{weight.shape[1]}]"
    shape = match.shape("x")
    if shape is None or len(shape) != 3 or shape[-1] != weight.shape[0]:
        return f"the attention input has shape {shape}, not [batch, sequence, {weight.shape[0]}]"
    return None


CHECKS.update({"packable_projections": packable_projections, "even_qkv_split": even_qkv_split})
COMPUTATIONS.update({"packed_qkv_weight": packed_qkv_weight, "packed_qkv_bias": packed_qkv_bias})
