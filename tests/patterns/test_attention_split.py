"""GPT-2's packed projection: one [D, 3D] projection Split into Q/K/V -> Attention with that packed weight, whether
the projection is still the exporter's Reshape -> Gemm -> Reshape (attention-packing-split) or already a MatMul +
Add over the 3-D input (attention-packing-split-3d, after linear-3d)."""

from __future__ import annotations

import numpy as np
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

B, S, H, DH = 2, 4, 2, 4
D = H * DH
RNG = np.random.default_rng(11)
PROJECTIONS = {
    "gemm": "x2 = Reshape (x, flat)\n g = Gemm (x2, w, b)\n qkv = Reshape (g, back)",
    "matmul": "g = MatMul (x, w)\n qkv = Add (g, b)",
}


def gpt2_attention(projection: str, bias_shape: tuple[int, ...] = (3 * D,)) -> object:
    text = f"""
    attn (float[2, 4, 8] x) => (float[2, 4, 8] out) {{
        {PROJECTIONS[projection]}
        q_lin, k_lin, v_lin = Split <axis = -1, num_outputs = 3> (qkv)
        q3 = Reshape (q_lin, shape4)
        q = Transpose <perm = [0, 2, 1, 3]> (q3)
        k3 = Reshape (k_lin, shape4)
        kt = Transpose <perm = [0, 2, 3, 1]> (k3)
        v3 = Reshape (v_lin, shape4)
        v = Transpose <perm = [0, 2, 1, 3]> (v3)
        m = MatMul (q, kt)
        s = Div (m, c)
        p = Softmax <axis = -1> (s)
        ctx = MatMul (p, v)
        ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
        out = Reshape (ct, shape3)
    }}"""
    inits = {"w": RNG.normal(size=(D, 3 * D)).astype(np.float32),
             "b": RNG.normal(size=bias_shape).astype(np.float32),
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
    weight = next(t for t in result.model.graph.initializer if list(t.dims) == [D, 3 * D])
    assert weight is not None


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
