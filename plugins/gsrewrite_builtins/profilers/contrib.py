"""Profilers of the onnxruntime contrib ops (``com.microsoft``) that gsrewrite's fusions and onnxruntime's
optimizers emit. Each counts the standard ops it replaces, in the form exporters emit them, so that a fused
model's total equals the original's:

* Attention (packed QKV): the three projections and their bias adds, Q x K^T, the scaling, the mask add,
  Softmax and P x V;
* MultiHeadAttention / GroupQueryAttention: the same without the projections (their inputs are projected),
  GroupQueryAttention's rotary embedding when ``do_rotary``;
* SkipLayerNormalization & co: the residual add (and bias add), then the normalization;
* FastGelu, BiasGelu, Gelu, QuickGelu: the activation's decomposition (and the bias add);
* EmbedLayerNormalization: the embedding adds and the normalization (the lookups are data movement);
* MatMulNBits, FusedMatMul, MatMulIntegerToFloat: a MatMul.
"""

from __future__ import annotations

from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import OpCost, OpProfiler, hookimpl
from gsrewrite_builtins.profilers import (
    ADD,
    GELU_ERF,
    GELU_TANH,
    LAYERNORM,
    MUL,
    RMSNORM,
    SIGMOID,
    SOFTMAX,
    cost,
    dims,
    has_input,
    input_elements,
    output_elements,
)
from gsrewrite_builtins.profilers.linear import matmul_macs
from gsrewrite_builtins.profilers.normalization import norm_macs, rows

#: rotary embedding per element: x * cos + rotate_half(x) * sin
ROTARY = 2 * MUL + ADD


def attention_core(batch: Any, heads: int, q_len: Any, kv_len: Any, head_size: Any, v_head_size: Any,
                   masked: bool) -> Any:
    """Q x K^T, scaling, (mask add), Softmax, P x V for one attention."""
    scores = batch * heads * q_len * kv_len
    macs = scores * head_size + scores * MUL + scores * SOFTMAX + scores * v_head_size
    return macs + scores * ADD if masked else macs


def profile_attention(node: gs.Node, context: Any) -> OpCost:
    x, w = dims(node.inputs[0]), dims(node.inputs[1])
    heads = int(node.attrs.get("num_heads", 0))
    if x is None or w is None or len(x) != 3 or len(w) != 2 or not heads:
        return cost(node, None)
    batch, seq, hidden_in = x
    sizes = node.attrs.get("qkv_hidden_sizes")
    hq, hk, hv = (int(s) for s in sizes) if sizes else (w[1] // 3,) * 3
    projections = batch * seq * hidden_in * (hq + hk + hv)
    if has_input(node, 2):
        projections = projections + batch * seq * (hq + hk + hv) * ADD
    kv_len = seq
    past = dims(node.inputs[4]) if has_input(node, 4) else None
    if past is not None and len(past) == 5:
        kv_len = seq + past[3]
    masked = has_input(node, 3) or has_input(node, 5)
    core = attention_core(batch, heads, seq, kv_len, hq // heads, hv // heads, masked)
    return cost(node, projections + core)


def profile_multi_head(node: gs.Node, context: Any) -> OpCost:
    q = dims(node.inputs[0])
    heads = int(node.attrs.get("num_heads", 0))
    if q is None or not heads:
        return cost(node, None)
    k = dims(node.inputs[1]) if has_input(node, 1) else None
    v = dims(node.inputs[2]) if has_input(node, 2) else None
    if len(q) == 3 and k is not None and v is not None and len(k) == 3 and len(v) == 3:
        batch, seq, hq = q
        kv_len, hv = k[1], v[2]
    elif len(q) == 5:  # packed QKV [B, S, N, 3, H]
        batch, seq, _, _, head = q
        kv_len, hq, hv = seq, head * heads, head * heads
    else:
        return cost(node, None)
    macs = attention_core(batch, heads, seq, kv_len, hq // heads, hv // heads,
                          has_input(node, 4) or has_input(node, 5))
    if has_input(node, 3):
        macs = macs + batch * seq * hq * ADD + batch * kv_len * (hq + hv) * ADD
    return cost(node, macs)


def profile_group_query(node: gs.Node, context: Any) -> OpCost:
    q = dims(node.inputs[0])
    heads, kv_heads = int(node.attrs.get("num_heads", 0)), int(node.attrs.get("kv_num_heads", 0))
    if q is None or len(q) != 3 or not heads or not kv_heads:
        return cost(node, None)
    batch, seq, width = q
    packed = not has_input(node, 1)
    head = width // (heads + 2 * kv_heads) if packed else width // heads
    present = dims(node.outputs[1]) if len(node.outputs) > 1 else None
    total = present[2] if present is not None and len(present) == 4 else seq
    macs = attention_core(batch, heads, seq, total, head, head, masked=False)
    if node.attrs.get("do_rotary", 0):
        macs = macs + batch * seq * (heads + kv_heads) * head * ROTARY
    return cost(node, macs)


def profile_rotary(node: gs.Node, context: Any) -> OpCost:
    out = output_elements(node)
    return cost(node, None if out is None else out * ROTARY)


def _skip_norm(per_element: int) -> OpProfiler:
    def profile(node: gs.Node, context: Any) -> OpCost:
        x = input_elements(node)
        extra = ADD + (ADD if has_input(node, 4) else 0)  # + skip, + bias
        macs = norm_macs(x, rows(node.inputs[0], -1), per_element + extra)
        return cost(node, macs)
    return profile


def _norm(per_element: int) -> OpProfiler:
    def profile(node: gs.Node, context: Any) -> OpCost:
        axis = int(node.attrs.get("axis", -1))
        return cost(node, norm_macs(input_elements(node), rows(node.inputs[0], axis), per_element))
    return profile


def _activation(per_element: int, bias_index: int | None = None) -> OpProfiler:
    def profile(node: gs.Node, context: Any) -> OpCost:
        out = output_elements(node)
        per = per_element + (ADD if bias_index is not None and has_input(node, bias_index) else 0)
        return cost(node, None if out is None else out * per)
    return profile


def profile_embed_layernorm(node: gs.Node, context: Any) -> OpCost:
    out = output_elements(node)
    adds = ADD + (ADD if has_input(node, 1) and has_input(node, 4) else 0)
    macs = norm_macs(out, rows(node.outputs[0], -1), LAYERNORM + adds) if out is not None else None
    return cost(node, macs)


def profile_contrib_matmul(node: gs.Node, context: Any) -> OpCost:
    return cost(node, matmul_macs(dims(node.inputs[0]), output_elements(node)))


PROFILERS: dict[str, OpProfiler] = {
    "Attention": profile_attention,
    "MultiHeadAttention": profile_multi_head,
    "GroupQueryAttention": profile_group_query,
    "RotaryEmbedding": profile_rotary,
    "SkipLayerNormalization": _skip_norm(LAYERNORM),
    "SkipSimplifiedLayerNormalization": _skip_norm(RMSNORM),
    "SimplifiedLayerNormalization": _norm(RMSNORM),
    "LayerNormalization": _norm(LAYERNORM),
    "FastGelu": _activation(GELU_TANH, bias_index=1),
    "BiasGelu": _activation(GELU_ERF, bias_index=1),
    "Gelu": _activation(GELU_ERF),
    "QuickGelu": _activation(SIGMOID + 2 * MUL),
    "BiasAdd": _activation(2 * ADD),
    "EmbedLayerNormalization": profile_embed_layernorm,
    "MatMulNBits": profile_contrib_matmul,
    "FusedMatMul": profile_contrib_matmul,
    "MatMulIntegerToFloat": profile_contrib_matmul,
    "DynamicQuantizeMatMul": profile_contrib_matmul,
}


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    if node.domain != "com.microsoft":
        return None
    profiler = PROFILERS.get(node.op)
    return profiler(node, context) if profiler is not None else None
