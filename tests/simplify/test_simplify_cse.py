"""eliminate-common-subexpressions and deduplicate-constants."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import model_from_text, op_counts

RNG = np.random.default_rng(2)


def test_duplicate_chains_collapse(simplified):
    model = model_from_text("""
    g (float[2, 3] x, float[2, 3] z) => (float[2, 3] y) {
        a1 = Add (x, z)
        a2 = Add (z, x)
        r1 = Relu (a1)
        r2 = Relu (a2)
        y = Mul (r1, r2)
    }""")
    result = simplified(model, "eliminate-common-subexpressions", "eliminate-dead-code")
    assert op_counts(result.model) == {"Add": 1, "Relu": 1, "Mul": 1}


def test_different_attributes_or_random_ops_stay(simplified):
    model = model_from_text("""
    g (float[2, 3] x) => (float[2, 3] y, float[2, 3] n) {
        a = LeakyRelu <alpha = 0.1> (x)
        b = LeakyRelu <alpha = 0.2> (x)
        y = Add (a, b)
        r1 = RandomNormalLike (x)
        r2 = RandomNormalLike (x)
        n = Add (r1, r2)
    }""")
    result = simplified(model, "eliminate-common-subexpressions", validate=False)
    assert op_counts(result.model) == {"LeakyRelu": 2, "Add": 2, "RandomNormalLike": 2}


def test_equal_constants_become_one(simplified):
    weight = RNG.normal(size=(3, 3)).astype(np.float32)
    model = model_from_text("""
    g (float[2, 3] x) => (float[2, 3] y) {
        a = MatMul (x, w1)
        b = MatMul (x, w2)
        y = Add (a, b)
    }""", initializers={"w1": weight, "w2": weight.copy()})
    result = simplified(model, "deduplicate-constants", "eliminate-common-subexpressions", "eliminate-dead-code")
    assert [t.name for t in result.model.graph.initializer] == ["w1"]
    assert op_counts(result.model) == {"MatMul": 1, "Add": 1}
    assert result.after.size < result.before.size


def test_same_bytes_other_dtype_or_shape_stay(simplified):
    data = np.arange(6, dtype=np.int32)
    model = model_from_text("""
    g (float[2, 3] x) => (float[2, 3] y) {
        a = Add (x, f)
        b = Add (a, g)
        y = Add (b, h)
    }""", initializers={"f": data.view(np.float32).reshape(2, 3) * 0 + 1, "g": np.ones((1, 6), np.float32)[:, :3],
                        "h": np.ones((2, 3), np.float32)})
    result = simplified(model, "deduplicate-constants")
    assert sorted(t.name for t in result.model.graph.initializer) == ["f", "g"]
