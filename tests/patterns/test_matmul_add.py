"""matmul-add: only 2-D MatMul + Add becomes Gemm; batched MatMuls stay (Gemm is 2-D only)."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

RNG = np.random.default_rng(2)
W = RNG.normal(size=(16, 8)).astype(np.float32)
BIAS = RNG.normal(size=8).astype(np.float32)


def test_2d_matmul_add_becomes_gemm():
    model = model_from_text("""
    g (float[4, 16] a) => (float[4, 8] y) {
        m = MatMul (a, w)
        y = Add (bias, m)
    }""", initializers={"w": W, "bias": BIAS})
    assert_rewrite(model, ["matmul-add"], {"matmul-add": 1}, produces={"Gemm": 1}, absent=["MatMul", "Add"])


def test_rank3_matmul_is_not_turned_into_an_invalid_gemm():
    model = model_from_text("""
    g (float[2, 4, 16] a) => (float[2, 4, 8] y) {
        m = MatMul (a, w)
        y = Add (m, bias)
    }""", initializers={"w": W, "bias": BIAS})
    result = assert_no_rewrite(model, ["matmul-add"])
    assert "rank 3" in result.near_misses["matmul-add"].reason


def test_computed_weight_is_not_turned_into_gemm():
    model = model_from_text("""
    g (float[4, 16] a, float[16, 8] w) => (float[4, 8] y) {
        m = MatMul (a, w)
        y = Add (m, bias)
    }""", initializers={"bias": BIAS})
    assert_no_rewrite(model, ["matmul-add"])
