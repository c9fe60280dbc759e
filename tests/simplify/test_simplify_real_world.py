"""Cleanups real-world exports need (issue 17): Pad into Conv/pooling, per-channel Mul/Add into Conv, constant
arithmetic chains, If on a constant condition, MatMul + Add -> Gemm. Each result is checked by onnxruntime
against the original (the ``simplified`` fixture), and the cases that must stay are asserted to stay."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from gsrewrite.testing import model_from_text, op_counts

RNG = np.random.default_rng(0)


def _w(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape).astype(np.float32)


# --- fold-pad ---------------------------------------------------------------------------------------------
def _pad_model(consumer: str, value: float = 0.0, attrs: str = "", relu: bool = False) -> onnx.ModelProto:
    pre = "r = Relu (x)" if relu else "r = Identity (x)"
    body = f"y = {consumer} <kernel_shape = [3, 3]{attrs}> (p)" if consumer != "Conv" \
        else "y = Conv <kernel_shape = [3, 3]> (p, w)"
    return model_from_text(f"""
    g (float[1, 4, 8, 8] x) => (float[1, {4 if consumer != 'Conv' else 6}, 8, 8] y) {{
        {pre}
        p = Pad (r, pads, v)
        {body}
    }}""", initializers={"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
                         "v": np.array(value, np.float32), "w": _w(6, 4, 3, 3)})


def test_zero_pad_folds_into_conv(simplified):
    result = simplified(_pad_model("Conv"), "fold-pad")
    assert "Pad" not in op_counts(result.model)
    conv = next(n for n in result.model.graph.node if n.op_type == "Conv")
    assert list(next(a for a in conv.attribute if a.name == "pads").ints) == [1, 1, 1, 1]


def test_pad_folds_into_average_pool_only_when_padding_counts(simplified):
    counted = simplified(_pad_model("AveragePool", attrs=", count_include_pad = 1"), "fold-pad")
    assert "Pad" not in op_counts(counted.model)
    excluded = simplified(_pad_model("AveragePool"), "fold-pad")
    assert op_counts(excluded.model)["Pad"] == 1  # border averages would change


def test_pad_folds_into_max_pool_after_relu_or_with_minus_infinity(simplified):
    assert "Pad" not in op_counts(simplified(_pad_model("MaxPool", relu=True), "fold-pad").model)
    assert "Pad" not in op_counts(simplified(_pad_model("MaxPool", value=-np.inf), "fold-pad").model)
    kept = simplified(_pad_model("MaxPool"), "fold-pad")  # zeros could win a max over negative inputs
    assert op_counts(kept.model)["Pad"] == 1


def test_pad_on_the_channel_axis_stays(simplified):
    model = model_from_text("""
    g (float[1, 4, 8, 8] x) => (float[1, 6, 6, 6] y) {
        p = Pad (x, pads)
        y = Conv <kernel_shape = [3, 3]> (p, w)
    }""", initializers={"pads": np.array([0, 1, 0, 0, 0, 1, 0, 0], np.int64), "w": _w(6, 6, 3, 3)})
    assert op_counts(simplified(model, "fold-pad").model)["Pad"] == 1


# --- fold-conv-affine -------------------------------------------------------------------------------------
def test_paddle_style_scale_and_shift_fold_into_the_conv(simplified):
    """Conv -> Mul[C,1,1] -> Add[C,1,1] with a -1 (dynamic) batch, as paddle2onnx writes a frozen BN."""
    model = model_from_text("""
    g (float[N, 3, 16, 16] x) => (float[N, 8, 14, 14] y) {
        c = Conv <kernel_shape = [3, 3]> (x, w, b)
        m = Mul (c, s)
        y = Add (m, t)
    }""", initializers={"w": _w(8, 3, 3, 3), "b": _w(8), "s": _w(8, 1, 1), "t": _w(8, 1, 1)})
    result = simplified(model, "fold-conv-affine")
    assert op_counts(result.model) == {"Conv": 1}
    assert result.counts["fold-conv-affine"] == 2


def test_a_conv_transpose_scale_folds_and_a_spatial_scale_stays(simplified):
    model = model_from_text("""
    g (float[1, 4, 5, 5] x) => (float[1, 6, 7, 7] y, float[1, 6, 7, 7] z) {
        c = ConvTranspose <kernel_shape = [3, 3]> (x, w)
        y = Mul (c, s)
        d = ConvTranspose <kernel_shape = [3, 3]> (x, w)
        z = Mul (d, spatial)
    }""", initializers={"w": _w(4, 6, 3, 3), "s": _w(1, 6, 1, 1), "spatial": _w(1, 1, 7, 7)})
    result = simplified(model, "fold-conv-affine")
    assert op_counts(result.model) == {"ConvTranspose": 2, "Mul": 1}


def test_a_conv_output_read_twice_stays(simplified):
    model = model_from_text("""
    g (float[1, 3, 8, 8] x) => (float[1, 4, 6, 6] y, float[1, 4, 6, 6] c) {
        c = Conv <kernel_shape = [3, 3]> (x, w)
        y = Mul (c, s)
    }""", initializers={"w": _w(4, 3, 3, 3), "s": _w(4, 1, 1)})
    assert op_counts(simplified(model, "fold-conv-affine").model) == {"Conv": 1, "Mul": 1}


# --- merge-constant-arith ---------------------------------------------------------------------------------
def test_constant_mul_and_add_chains_merge(simplified):
    model = model_from_text("""
    g (float[2, 8] x, int64[4] i) => (float[2, 8] y, int64[4] j) {
        a = Mul (x, s1)
        b = Mul (s2, a)
        c = Add (b, t1)
        y = Add (c, t2)
        k = Add (i, n1)
        j = Add (k, n2)
    }""", initializers={"s1": _w(8), "s2": np.float32(0.5), "t1": _w(8), "t2": _w(2, 8),
                        "n1": np.array([1, 2, 3, 4], np.int64), "n2": np.int64(7)})
    result = simplified(model, "merge-constant-arith")
    assert op_counts(result.model) == {"Mul": 1, "Add": 2}


# --- inline-constant-if -----------------------------------------------------------------------------------
def _if_model(rate: int) -> onnx.ModelProto:
    """A voice-activity-style model: If (sample rate == 16000) picks one of two branches."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    then_out = helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 16])
    else_out = helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 16])
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [], [then_out])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t0"]), helper.make_node("Abs", ["t0"], ["e"])],
                               "else", [], [else_out])
    nodes = [helper.make_node("Equal", ["sr", "ref"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    inits = [helper.make_tensor("sr", TensorProto.INT64, [], [rate]),
             helper.make_tensor("ref", TensorProto.INT64, [], [16000]),
             helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_if_on_a_constant_condition_becomes_its_branch(simplified):
    taken = simplified(_if_model(16000))
    assert op_counts(taken.model) == {"Mul": 1}
    other = simplified(_if_model(8000))
    assert op_counts(other.model) == {"Neg": 1, "Abs": 1}
    assert other.model.graph.output[0].name == "y"


# --- fuse-matmul-add --------------------------------------------------------------------------------------
def test_matmul_plus_bias_on_2d_becomes_gemm_and_3d_stays(simplified):
    model = model_from_text("""
    g (float[4, 8] x, float[2, 4, 8] z) => (float[4, 16] y, float[2, 4, 16] v) {
        m = MatMul (x, w)
        y = Add (m, b)
        n = MatMul (z, w)
        v = Add (n, b)
    }""", initializers={"w": _w(8, 16), "b": _w(16)})
    result = simplified(model, "fuse-matmul-add")
    assert op_counts(result.model) == {"Gemm": 1, "MatMul": 1, "Add": 1}


# --- the real-world-shaped fixtures (tests/fixtures/real_world.py) ----------------------------------------
def test_real_world_fixtures_lose_their_exporter_leftovers(tmp_path):
    """(Not through ``simplified``: onnx's full check rejects paddle2onnx's -1 dims in the originals too.)"""
    import sys
    from pathlib import Path

    from gsrewrite.pipelines import ValidationOptions, simplify

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
    from real_world import build_all

    for name, (model, feeds) in build_all().items():
        np.savez(tmp_path / f"{name}.npz", **feeds)
        result = simplify(model, validate=ValidationOptions(inputs=str(tmp_path / f"{name}.npz")))
        assert not result.dropped and result.validation.ok, (name, result.dropped)
        ops = op_counts(result.model)
        assert not {"Pad", "BatchNormalization", "Identity"} & set(ops), (name, ops)
        if name.startswith("paddle"):  # the per-channel scale and shift went into the convs
            assert "Mul" not in ops and ops.get("Add", 0) == 0, (name, ops)
        assert sum(ops.values()) < len(model.graph.node) or name == "vad_if", (name, ops)


def test_a_reduction_over_size_one_axes_and_a_squeeze_unsqueeze_round_trip_go(simplified):
    model = model_from_text("""
    g (float[2, 1, 8] x, float[1, 64] z) => (float[2, 1, 8] y, float[2, 8] w, float[1, 64] v) {
        r = ReduceMean <axes = [1], keepdims = 1> (x)
        y = Relu (r)
        w = ReduceMean <axes = [1], keepdims = 0> (x)
        s = Squeeze (z, zero)
        u = Unsqueeze (s, zero)
        v = Relu (u)
    }""", opset=13, initializers={"zero": np.array([0], np.int64)})
    result = simplified(model, "eliminate-noops", "merge-squeezes")
    assert op_counts(result.model) == {"ReduceMean": 1, "Relu": 2}  # keepdims=0 changes the shape: it stays
