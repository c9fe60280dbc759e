"""gqa: attention over K/V heads repeated per group of Q heads (transformers' repeat_kv) -> GroupQueryAttention."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

HEADS, KV_HEADS, DH = 4, 2, 8
REPEAT = HEADS // KV_HEADS

# repeat_kv as the legacy exporter writes it: the targets computed from the tensor's own shape at run time
REPEAT_KV = """
      {x}s = Shape ({x})
      {x}lead = Slice ({x}s, zero_1, two_1)
      {x}tail = Slice ({x}s, two_1, four_1)
      {x}et = Concat <axis = 0> ({x}lead, rep_1, {x}tail)
      {x}b = Slice ({x}s, zero_1, one_1)
      {x}rt = Concat <axis = 0> ({x}b, heads_1, {x}tail)
      {x}u = Unsqueeze ({x}, {axis})
      {x}5 = Expand ({x}u, {x}et)
      {x}4 = Reshape ({x}5, {x}rt)
"""
# SDPA (dynamo exporter): the repeat's Reshape also flattens to [B*H, L, dh] for the K transpose
DYNAMO_KEY = """
      kks = Shape (kk)
      kklead = Slice (kks, zero_1, two_1)
      kktail = Slice (kks, two_1, four_1)
      kket = Concat <axis = 0> (kklead, rep_1, kktail)
      kku = Unsqueeze (kk, two_1)
      kk5 = Expand (kku, kket)
      flat = Reshape (kk5, flat3)
      t = Transpose <perm = [0, 2, 1]> (flat)
      kt = Reshape (t, kt4)
"""


def _model(keys: str = "legacy", axis: str = "two_1", opset: int = 17) -> onnx.ModelProto:
    """x [B, S, 16] -> LLaMA attention (4 Q heads, 2 KV heads of 8) with an additive [B, 1, S, S] bias."""
    rng = np.random.default_rng(0)
    if keys == "legacy":
        key = REPEAT_KV.format(x="kk", axis=axis) + "      kt = Transpose <perm = [0, 1, 3, 2]> (kk4)"
    else:  # SDPA's flatten targets fix the sequence length: a static export
        key = DYNAMO_KEY
    text = f"""
    agraph (float[batch, seq, 16] x, float[batch, 1, seq, seq] bias) => (float[batch, seq, 32] out) {{
      ql = MatMul (x, wq)
      q3 = Reshape (ql, qshape)
      q4 = Transpose <perm = [0, 2, 1, 3]> (q3)
      kl = MatMul (x, wk)
      k3 = Reshape (kl, kvshape)
      kk = Transpose <perm = [0, 2, 1, 3]> (k3)
      vl = MatMul (x, wv)
      v3 = Reshape (vl, kvshape)
      vv = Transpose <perm = [0, 2, 1, 3]> (v3)
      {key}
      {REPEAT_KV.format(x="vv", axis=axis)}
      m = MatMul (q4, kt)
      s = Mul (m, c)
      sm = Add (s, bias)
      p = Softmax <axis = -1> (sm)
      ctx = MatMul (p, vv4)
      ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
      out = Reshape (ct, oshape)
    }}
    """
    if keys == "dynamo":
        text = text.replace("batch, seq", "2, 5").replace("batch, 1, seq, seq", "2, 1, 5, 5")
    return model_from_text(text, opset=opset, initializers={
        "wq": rng.standard_normal((16, HEADS * DH)).astype(np.float32),
        "wk": rng.standard_normal((16, KV_HEADS * DH)).astype(np.float32),
        "wv": rng.standard_normal((16, KV_HEADS * DH)).astype(np.float32),
        "qshape": np.array([0, 0, HEADS, DH], np.int64), "kvshape": np.array([0, 0, KV_HEADS, DH], np.int64),
        "oshape": np.array([0, 0, HEADS * DH], np.int64), "c": np.array(DH ** -0.5, np.float32),
        "zero_1": np.array([0], np.int64), "one_1": np.array([1], np.int64), "two_1": np.array([2], np.int64),
        "four_1": np.array([4], np.int64), "rep_1": np.array([REPEAT], np.int64),
        "heads_1": np.array([HEADS], np.int64), "flat3": np.array([-1, 5, DH], np.int64),
        "kt4": np.array([-1, HEADS, DH, 5], np.int64),
    })


def _attrs(model: onnx.ModelProto, op: str) -> dict:
    node = next(n for n in model.graph.node if n.op_type == op)
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("keys", ["legacy", "dynamo"])
def test_repeated_kv_becomes_group_query_attention(keys: str) -> None:
    result = assert_rewrite(_model(keys), ["gqa"], {"gqa": 1},
                            produces={"com.microsoft.GroupQueryAttention": 1}, absent=["Unsqueeze", "Softmax"])
    attrs = _attrs(result.model, "GroupQueryAttention")
    assert (attrs["num_heads"], attrs["kv_num_heads"], attrs["causal"]) == (HEADS, KV_HEADS, 0)
    assert attrs["scale"] == pytest.approx(DH ** -0.5)


def test_onnx_target_gives_attention_23_the_unrepeated_kv() -> None:
    result = assert_rewrite(_model(opset=23), ["gqa"], {"gqa": 1}, target="onnx", produces={"Attention": 1},
                            absent=["Expand", "Softmax"])
    attention = next(n for n in result.model.graph.node if n.op_type == "Attention")
    assert attention.input[1] == "kk" and attention.input[2] == "vv"


def test_tiled_heads_are_not_grouped() -> None:
    # Unsqueeze before the heads axis then Expand: head h reads KV head h % 2 (tiling), not h // 2
    tiled = _model(axis="one_1")
    result = assert_no_rewrite(tiled, ["gqa"])
    assert "not after its heads axis" in result.near_misses["gqa"].reason
