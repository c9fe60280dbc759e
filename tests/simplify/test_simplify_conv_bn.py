"""fuse-conv-bn: the conv-bn pattern run as a simplify pass (after folding made the Conv bias constant)."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import model_from_text, op_counts

RNG = np.random.default_rng(3)
STATS = {"scale": RNG.uniform(0.5, 2, 4).astype(np.float32), "shift": RNG.normal(size=4).astype(np.float32),
         "mean": RNG.normal(size=4).astype(np.float32), "var": RNG.uniform(0.5, 2, 4).astype(np.float32),
         "w": RNG.normal(size=(4, 3, 3, 3)).astype(np.float32)}


def test_bn_folds_into_conv_with_a_computed_zero_bias(simplified):
    """The dynamo exporter's Conv bias is Expand(CastLike(0, x), Shape(w)[0:1]): folded first, then fused."""
    model = model_from_text("""
    g (float[1, 3, 8, 8] x) => (float[1, 4, 6, 6] y) {
        s = Shape <start = 0, end = 1> (w)
        zero = CastLike (z, x)
        b = Expand (zero, s)
        c = Conv <kernel_shape = [3, 3]> (x, w, b)
        y = BatchNormalization <epsilon = 0.001> (c, scale, shift, mean, var)
    }""", opset=18, initializers=STATS | {"z": np.array(0.0, np.float64)})
    result = simplified(model)
    assert op_counts(result.model) == {"Conv": 1}
    assert result.counts["fuse-conv-bn"] == 1


def test_bn_with_runtime_statistics_is_kept(simplified):
    model = model_from_text("""
    g (float[1, 3, 8, 8] x, float[4] mean) => (float[1, 4, 6, 6] y) {
        c = Conv <kernel_shape = [3, 3]> (x, w)
        y = BatchNormalization <epsilon = 0.001> (c, scale, shift, mean, var)
    }""", initializers={k: v for k, v in STATS.items() if k != "mean"})
    result = simplified(model, "fuse-conv-bn")
    assert op_counts(result.model) == {"Conv": 1, "BatchNormalization": 1}


def test_bn_without_an_epsilon_attribute_folds_with_the_schema_default(simplified):
    """An exporter that leaves epsilon at its default writes no attribute: the template's ``@eps`` reads the
    schema's 1e-5 (simplify's passes run on the graph as imported, not canonicalized), and the outputs agree."""
    model = model_from_text("""
    g (float[1, 3, 8, 8] x) => (float[1, 4, 6, 6] y) {
        c = Conv <kernel_shape = [3, 3]> (x, w)
        y = BatchNormalization (c, scale, shift, mean, var)
    }""", opset=17, initializers=STATS | {"var": np.full(4, 1e-4, np.float32)})
    result = simplified(model, "fuse-conv-bn")
    assert op_counts(result.model) == {"Conv": 1}
    import onnxruntime as ort

    x = RNG.normal(size=(1, 3, 8, 8)).astype(np.float32)
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
           for m in (model, result.model)]
    np.testing.assert_allclose(run[1], run[0], rtol=1e-3, atol=1e-3)
