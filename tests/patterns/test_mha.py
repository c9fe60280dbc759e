"""mha: text-built attention blocks in every exporter spelling, derived num_heads/scale, must-not-match cases."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

B, S, H, DH = 2, 4, 2, 4
D = H * DH
SCORES = {  # the softmax scale c spelled as exporters do; each yields scale 1/sqrt(dh)
    "div": ("m = MatMul (q, kt)\n s = Div (m, c)", np.sqrt(DH)),
    "mul": ("m = MatMul (q, kt)\n s = Mul (c, m)", 1 / np.sqrt(DH)),
    "split": ("qs = Mul (q, c)\n ks = Mul (kt, c)\n s = MatMul (qs, ks)", DH ** -0.25),
    "none": ("s = MatMul (q, kt)", None),
}
KEYS = {
    "legacy": "k3 = Reshape (k_lin, shape4)\n kt = Transpose <perm = [0, 2, 3, 1]> (k3)",
    "two_step": "k3 = Reshape (k_lin, shape4)\n k4 = Transpose <perm = [0, 2, 1, 3]> (k3)\n"
                "kt = Transpose <perm = [0, 1, 3, 2]> (k4)",
    "dynamo": "k3 = Reshape (k_lin, shape4)\n k4 = Transpose <perm = [0, 2, 1, 3]> (k3)\n"
              "r = Reshape (k4, flat3)\n t = Transpose <perm = [0, 2, 1]> (r)\n kt = Reshape (t, kt4)",
}


def attention(scores="div", keys="legacy", mask=True, nan_guard=False, probs_out=False, perm=(0, 2, 1, 3)):
    """Self-attention from Q/K/V projections [B, S, D] to the context [B, S, D]."""
    outputs = "float[2, 4, 8] out" + (", float[2, 2, 4, 4] p" if probs_out else "")
    inputs = "float[2, 4, 8] q_lin, float[2, 4, 8] k_lin, float[2, 4, 8] v_lin"
    inputs += ", float[2, 1, 4, 4] mask" if mask else ""
    masked = "sm = Add (s, mask)" if mask else "sm = Identity (s)"
    guard = "n = IsNaN (p)\n pg = Where (n, zero, p)" if nan_guard else "pg = Identity (p)"
    text = f"""
    attn ({inputs}) => ({outputs}) {{
        q3 = Reshape (q_lin, shape4)
        q = Transpose <perm = {list(perm)}> (q3)
        {KEYS[keys]}
        v3 = Reshape (v_lin, shape4)
        v = Transpose <perm = [0, 2, 1, 3]> (v3)
        {SCORES[scores][0]}
        {masked}
        p = Softmax <axis = -1> (sm)
        {guard}
        ctx = MatMul (pg, v)
        ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
        out = Reshape (ct, shape3)
    }}"""
    inits = {"shape4": np.array([B, S, H, DH], np.int64), "shape3": np.array([B, S, D], np.int64),
             "flat3": np.array([B * H, S, DH], np.int64), "kt4": np.array([B, H, DH, S], np.int64),
             "zero": np.array(0.0, np.float32)}
    if SCORES[scores][1] is not None:
        inits["c"] = np.array(SCORES[scores][1], np.float32)
    used = text
    return model_from_text(text, opset=17, initializers={k: v for k, v in inits.items() if k in used})


def _attrs(model: onnx.ModelProto, op: str) -> dict:
    node = next(n for n in model.graph.node if n.op_type == op)
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("scores", sorted(SCORES))
@pytest.mark.parametrize("keys", sorted(KEYS))
def test_every_scale_and_key_spelling(scores, keys):
    result = assert_rewrite(attention(scores, keys), ["mha"], {"mha": 1},
                            produces={"com.microsoft.MultiHeadAttention": 1}, absent=["Softmax", "Transpose"])
    attrs = _attrs(result.model, "MultiHeadAttention")
    assert attrs["num_heads"] == H
    expected = 1 / np.sqrt(DH) if scores != "none" else 1.0
    assert attrs["scale"] == pytest.approx(expected, rel=1e-5)


def test_without_mask_and_with_nan_guard():
    result = assert_rewrite(attention(mask=False, nan_guard=True), ["mha"], {"mha": 1})
    assert len(next(n for n in result.model.graph.node if n.op_type == "MultiHeadAttention").input) == 3


def test_target_onnx_needs_opset_23_and_upgrades_on_request():
    result = assert_no_rewrite(attention(), ["mha"], target="onnx")
    assert "needs opset 23" in result.skipped["mha"]
    from gsrewrite.pipelines import apply

    upgraded = apply(attention(), ["mha"], target="onnx", opset=23)
    assert upgraded.counts == {"mha": 1} and upgraded.validation.ok
    assert _attrs(upgraded.model, "Attention")["q_num_heads"] == H


def test_attention_probabilities_used_outside_are_not_fused():
    result = assert_no_rewrite(attention(probs_out=True), ["mha"])
    assert "graph output" in result.near_misses["mha"].reason


def test_wrong_head_transpose_is_not_fused():
    result = assert_no_rewrite(attention(perm=(0, 2, 3, 1)), ["mha"])  # same shape here (S == dh), wrong axes
    assert "perm" in result.near_misses["mha"].reason


def _heads_to_context(scores: str) -> str:
    """The lines from the Q/K/V projections (q_lin, k_lin, v_lin) to the context ``out``, around ``scores``
    (text that computes ``sm``, the masked scores, from ``q`` and ``kt``)."""
    return f"""
        q3 = Reshape (q_lin, shape4)
        q = Transpose <perm = [0, 2, 1, 3]> (q3)
        k3 = Reshape (k_lin, shape4)
        kt = Transpose <perm = [0, 2, 3, 1]> (k3)
        v3 = Reshape (v_lin, shape4)
        v = Transpose <perm = [0, 2, 1, 3]> (v3)
        {scores}
        p = Softmax <axis = -1> (sm)
        ctx = MatMul (p, v)
        ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
        out = Reshape (ct, shape3)"""


def test_two_score_biases_are_merged_then_fused():
    """T5: scores + position bias + mask; the merged form must not be matched again (no ping-pong)."""
    text = f"""
    attn (float[2, 4, 8] q_lin, float[2, 4, 8] k_lin, float[2, 4, 8] v_lin, float[2, 1, 4, 4] mask)
         => (float[2, 4, 8] out) {{
        {_heads_to_context("s = MatMul (q, kt)  sb = Add (s, position_bias)  sm = Add (sb, mask)")}
    }}"""
    inits = {"shape4": np.array([B, S, H, DH], np.int64), "shape3": np.array([B, S, D], np.int64),
             "position_bias": np.random.default_rng(5).normal(size=(1, H, S, S)).astype(np.float32)}
    result = assert_rewrite(model_from_text(text, initializers=inits), ["mha"],
                            {"attention-bias-merge": 1, "mha": 1}, produces={"com.microsoft.MultiHeadAttention": 1})
    assert _attrs(result.model, "MultiHeadAttention")["scale"] == pytest.approx(1.0)


def test_projections_are_packed_into_one_attention_with_and_without_mask():
    rng = np.random.default_rng(6)
    for mask in (True, False):
        masked = "sm = Add (s, mask)" if mask else "sm = Identity (s)"
        text = f"""
        g (float[2, 4, 8] x{", float[2, 1, 4, 4] mask" if mask else ""}) => (float[2, 4, 8] out) {{
            qm = MatMul (x, wq)
            q_lin = Add (qm, bq)
            km = MatMul (x, wk)
            k_lin = Add (bk, km)
            v_lin = MatMul (x, wv)
            {_heads_to_context("m = MatMul (q, kt)  s = Div (m, c)  " + masked)}
        }}"""
        weights = {f"w{n}": rng.normal(size=(D, D)).astype(np.float32) for n in "qkv"}
        inits = {**weights, "bq": rng.normal(size=D).astype(np.float32), "bk": rng.normal(size=D).astype(np.float32),
                 "shape4": np.array([B, S, H, DH], np.int64), "shape3": np.array([B, S, D], np.int64),
                 "c": np.array(np.sqrt(DH), np.float32)}
        result = assert_rewrite(model_from_text(text, initializers=inits), ["mha"],
                                {"mha": 1, "attention-packing": 1}, produces={"com.microsoft.Attention": 1},
                                absent=["MatMul", "Softmax"])
        node = next(n for n in result.model.graph.node if n.op_type == "Attention")
        assert len(node.input) == (6 if mask else 3)


# --- GPT-2's packed projection: one [D, 3D] projection Split into Q/K/V -> Attention with that packed weight,
# whether still the exporter's Reshape -> Gemm -> Reshape (attention-packing-split) or already a MatMul + Add
# over the 3-D input (attention-packing-split-3d, after linear-3d)
SPLIT_RNG = np.random.default_rng(11)
PROJECTIONS = {
    "gemm": "x2 = Reshape (x, flat)\n g = Gemm (x2, w, b)\n qkv = Reshape (g, back)",
    "matmul": "g = MatMul (x, w)\n qkv = Add (g, b)",
}


def gpt2_attention(projection: str, bias_shape: tuple[int, ...] = (3 * D,)) -> object:
    text = f"""
    attn (float[2, 4, 8] x) => (float[2, 4, 8] out) {{
        {PROJECTIONS[projection]}
        q_lin, k_lin, v_lin = Split <axis = -1, num_outputs = 3> (qkv)
        {_heads_to_context("m = MatMul (q, kt)  sm = Div (m, c)")}
    }}"""
    inits = {"w": SPLIT_RNG.normal(size=(D, 3 * D)).astype(np.float32),
             "b": SPLIT_RNG.normal(size=bias_shape).astype(np.float32),
             "flat": np.array([-1, D], np.int64), "back": np.array([B, S, 3 * D], np.int64),
             "shape4": np.array([B, S, H, DH], np.int64), "shape3": np.array([B, S, D], np.int64),
             "c": np.array(np.sqrt(DH), np.float32)}
    return model_from_text(text, opset=18, initializers={k: v for k, v in inits.items() if k in text})


@pytest.mark.parametrize("projection", sorted(PROJECTIONS))
def test_split_projection_becomes_packed_attention(projection):
    packing = "attention-packing-split" if projection == "gemm" else "attention-packing-split-3d"
    result = assert_rewrite(gpt2_attention(projection), ["mha"], {"mha": 1, packing: 1},
                            produces={"com.microsoft.Attention": 1},
                            absent=["Split", "Gemm", "MatMul", "com.microsoft.MultiHeadAttention"])
    assert [list(t.dims) for t in result.model.graph.initializer if len(t.dims) == 2] == [[D, 3 * D]]


def test_with_linear_3d_the_gemm_projection_packs_too():
    # linear-3d turns the projection into MatMul + Add while mha fuses the rest; the 3-D form then packs
    assert_rewrite(gpt2_attention("gemm"), ["mha", "linear-3d"],
                   {"mha": 1, "linear-3d": 1, "attention-packing-split-3d": 1},
                   produces={"com.microsoft.Attention": 1}, absent=["Split", "Gemm", "MatMul"])


def test_a_bias_that_is_not_one_vector_stays_unpacked():
    model = gpt2_attention("matmul", bias_shape=(S, 3 * D))  # a per-position bias: not Attention's [3D]
    assert_rewrite(model, ["mha"], {"mha": 1}, produces={"com.microsoft.MultiHeadAttention": 1},
                   absent=["com.microsoft.Attention"])


def test_without_multi_head_attention_nothing_packs():
    assert_no_rewrite(gpt2_attention("matmul"), ["attention-packing-split-3d"])


def _grouped_cross_attention(kv_dim: str) -> onnx.ModelProto:
    """LLaMA-style grouped attention (4 Q heads, 2 KV heads of 8, repeat_kv) whose K/V come from ``mem`` of
    length ``kv_dim``: self-attention when it is the query's own dim, cross-attention otherwise."""
    rng = np.random.default_rng(0)
    repeat = """
      {x}s = Shape ({x})
      {x}lead = Slice ({x}s, zero_1, two_1)
      {x}tail = Slice ({x}s, two_1, four_1)
      {x}et = Concat <axis = 0> ({x}lead, rep_1, {x}tail)
      {x}b = Slice ({x}s, zero_1, one_1)
      {x}rt = Concat <axis = 0> ({x}b, heads_1, {x}tail)
      {x}u = Unsqueeze ({x}, two_1)
      {x}5 = Expand ({x}u, {x}et)
      {x}4 = Reshape ({x}5, {x}rt)"""
    text = f"""
    agraph (float[batch, seq, 16] x, float[batch, {kv_dim}, 16] mem, float[batch, 1, seq, {kv_dim}] bias)
        => (float[batch, seq, 32] out) {{
      ql = MatMul (x, wq)
      q3 = Reshape (ql, qshape)
      q4 = Transpose <perm = [0, 2, 1, 3]> (q3)
      kl = MatMul (mem, wk)
      k3 = Reshape (kl, kvshape)
      kk = Transpose <perm = [0, 2, 1, 3]> (k3)
      vl = MatMul (mem, wv)
      v3 = Reshape (vl, kvshape)
      vv = Transpose <perm = [0, 2, 1, 3]> (v3)
      {repeat.format(x="kk")}
      kt = Transpose <perm = [0, 1, 3, 2]> (kk4)
      {repeat.format(x="vv")}
      m = MatMul (q4, kt)
      s = Mul (m, c)
      sm = Add (s, bias)
      p = Softmax <axis = -1> (sm)
      ctx = MatMul (p, vv4)
      ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
      out = Reshape (ct, oshape)
    }}"""
    return model_from_text(text, initializers={
        "wq": rng.standard_normal((16, 32)).astype(np.float32), "wk": rng.standard_normal((16, 16)).astype(np.float32),
        "wv": rng.standard_normal((16, 16)).astype(np.float32), "qshape": np.array([0, 0, 4, 8], np.int64),
        "kvshape": np.array([0, 0, 2, 8], np.int64), "oshape": np.array([0, 0, 32], np.int64),
        "c": np.array(8 ** -0.5, np.float32), "zero_1": np.array([0], np.int64), "one_1": np.array([1], np.int64),
        "two_1": np.array([2], np.int64), "four_1": np.array([4], np.int64), "rep_1": np.array([2], np.int64),
        "heads_1": np.array([4], np.int64)})


def test_grouped_attention_needs_provably_equal_query_and_key_lengths():
    """Two different symbols may be different lengths (grouped_attention._differ alone would accept them)."""
    assert_rewrite(_grouped_cross_attention("seq"), ["gqa"], {"gqa": 1})
    result = assert_no_rewrite(_grouped_cross_attention("mem_len"), ["gqa"])
    assert any("not provably self-attention" in m.reason for m in result.near_misses.values())
