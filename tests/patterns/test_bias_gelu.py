"""bias-gelu (after gelu fused): folding a bias into the op that precedes it (conv-add: test_conv_affine.py)."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import assert_rewrite, model_from_text

RNG = np.random.default_rng(4)


def linear_gelu(bias_shape=(16,)):
    text = """
    g (float[2, 4, 8] x) => (float[2, 4, 16] y) {
        m = MatMul (x, w)
        h = Add (bias, m)
        t = Div (h, sqrt2)
        e = Erf (t)
        p = Add (e, one)
        hp = Mul (h, p)
        y = Mul (hp, half)
    }"""
    inits = {"w": RNG.normal(size=(8, 16)).astype(np.float32),
             "bias": RNG.normal(size=bias_shape).astype(np.float32), "sqrt2": np.array(np.sqrt(2), np.float32),
             "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    return model_from_text(text, initializers=inits)


def test_gelu_then_bias_gelu():
    assert_rewrite(linear_gelu(), ["gelu", "bias-gelu"], {"gelu-erf": 1, "bias-gelu": 1},
                   produces={"com.microsoft.BiasGelu": 1, "MatMul": 1}, absent=["Add", "com.microsoft.Gelu"])


def test_bias_over_more_than_the_last_axis_stays():
    result = assert_rewrite(linear_gelu(bias_shape=(4, 16)), ["gelu", "bias-gelu"], {"gelu-erf": 1})
    assert "bias-gelu" not in result.counts
