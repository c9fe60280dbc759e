"""linear-3d: Reshape -> Gemm -> Reshape over the leading axes of an N-D input becomes MatMul (+ Add)."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

RNG = np.random.default_rng(5)
W = RNG.normal(size=(16, 8)).astype(np.float32)
BIAS = RNG.normal(size=8).astype(np.float32)

STATIC = """
g (float[2, 3, 16] x) => (float[2, 3, 8] y) {
    x2 = Reshape (x, flat)
    y2 = Gemm (x2, w, c)
    y = Reshape (y2, back)
}"""

# GPT-2's Conv1D in a dynamic export: both targets computed from x's shape at run time
DYNAMIC = """
g (float["batch", "seq", 16] x) => (float["batch", "seq", 8] y) {
    dims = Shape (x)
    lead = Slice (dims, zero, minus_one)
    x2 = Reshape (x, flat)
    y2 = Gemm (x2, w, c)
    target = Concat <axis = 0> (lead, n)
    y = Reshape (y2, target)
}"""

CONSTS = {"flat": np.array([-1, 16], np.int64), "back": np.array([2, 3, 8], np.int64), "w": W, "c": BIAS}
DYN_CONSTS = {"flat": np.array([-1, 16], np.int64), "zero": np.array([0], np.int64),
              "minus_one": np.array([-1], np.int64), "n": np.array([8], np.int64), "w": W, "c": BIAS}


def test_static_flattened_gemm_becomes_matmul_add():
    model = model_from_text(STATIC, initializers=CONSTS)
    assert_rewrite(model, ["linear-3d"], {"linear-3d": 1}, produces={"MatMul": 1, "Add": 1},
                   absent=["Gemm", "Reshape"])


def test_run_time_shape_targets_are_proven_from_the_symbolic_shapes():
    model = model_from_text(DYNAMIC, initializers=DYN_CONSTS)
    assert_rewrite(model, ["linear-3d"], {"linear-3d": 1}, produces={"MatMul": 1, "Add": 1},
                   absent=["Gemm", "Reshape", "Shape", "Concat"])


def test_transposed_weight_and_no_bias_variants():
    transposed = model_from_text(STATIC.replace("Gemm (x2, w, c)", "Gemm <transB = 1> (x2, w, c)"),
                                 initializers={**CONSTS, "w": np.ascontiguousarray(W.T)})
    assert_rewrite(transposed, ["linear-3d"], {"linear-3d-transposed": 1}, produces={"MatMul": 1, "Add": 1},
                   absent=["Gemm", "Transpose"])
    plain = model_from_text(STATIC.replace("Gemm (x2, w, c)", "Gemm (x2, w)"),
                            initializers={k: v for k, v in CONSTS.items() if k != "c"})
    assert_rewrite(plain, ["linear-3d"], {"linear-3d-nobias": 1}, produces={"MatMul": 1}, absent=["Add", "Gemm"])


def test_restoring_other_leading_axes_is_not_rewritten():
    # [2, 3, 16] -> [6, 8] -> [3, 2, 8]: the rows are regrouped, not given back to x's leading axes
    model = model_from_text(STATIC.replace("float[2, 3, 8] y", "float[3, 2, 8] y"),
                            initializers={**CONSTS, "back": np.array([3, 2, 8], np.int64)})
    result = assert_no_rewrite(model, ["linear-3d"])
    assert "leading axes" in result.near_misses["linear-3d"].reason


def test_flattening_more_than_the_leading_axes_is_not_rewritten():
    # [2, 3, 4, 4] -> [6, 16]: the last two axes are merged (heads and head size), not kept
    model = model_from_text("""
    g (float[2, 3, 4, 4] x) => (float[2, 3, 8] y) {
        x2 = Reshape (x, flat)
        y2 = Gemm (x2, w, c)
        y = Reshape (y2, back)
    }""", initializers=CONSTS)
    result = assert_no_rewrite(model, ["linear-3d"])
    assert "last axis kept" in result.near_misses["linear-3d"].reason


def test_a_2d_input_and_a_per_row_bias_are_not_rewritten():
    two_d = model_from_text("""
    g (float[6, 16] x) => (float[6, 8] y) {
        x2 = Reshape (x, flat)
        y2 = Gemm (x2, w, c)
        y = Reshape (y2, back)
    }""", initializers={**CONSTS, "back": np.array([6, 8], np.int64)})
    miss = assert_no_rewrite(two_d, ["linear-3d"]).near_misses.get("linear-3d")
    assert miss is None or "rank >= 3" in miss.reason  # (the no-op Reshapes may be gone before matching)
    per_row = model_from_text(STATIC, initializers={**CONSTS, "c": RNG.normal(size=(6, 8)).astype(np.float32)})
    assert "bias" in assert_no_rewrite(per_row, ["linear-3d"]).near_misses["linear-3d"].reason


def test_transposed_weight_without_bias() -> None:
    # Gemm <transB = 1> (x2, w) with W stored [N, K]: the weight is transposed once, no Add is added
    model = model_from_text(STATIC.replace("Gemm (x2, w, c)", "Gemm <transB = 1> (x2, w)"),
                            initializers={"flat": CONSTS["flat"], "back": CONSTS["back"],
                                          "w": np.ascontiguousarray(W.T)})
    result = assert_rewrite(model, ["linear-3d"], {"linear-3d-nobias-transposed": 1}, produces={"MatMul": 1},
                            absent=["Add", "Gemm", "Reshape", "Transpose"])
    matmul = next(n for n in result.model.graph.node if n.op_type == "MatMul")
    weight = next(t for t in result.model.graph.initializer if t.name == matmul.input[1])
    assert list(weight.dims) == [16, 8]
