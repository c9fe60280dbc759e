"""conv-affine: a per-channel constant Mul or Add after a Conv / ConvTranspose folded into its weight and bias, as
``apply`` patterns and as the ``fold-conv-affine`` simplify pass (the same pattern file, run by the engine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text, op_counts

RNG = np.random.default_rng(4)
CLI = str(Path(sys.executable).parent / "gsrewrite")


def _conv(op: str = "Mul", k_shape: tuple[int, ...] = (4, 1, 1), bias: bool = False, transpose: bool = False,
          group: int = 1, k_dtype: str = "float32") -> onnx.ModelProto:
    """x [1, 4, 8, 8] -> Conv (or ConvTranspose) with 4 output channels -> ``op`` by a constant ``k``."""
    conv = "ConvTranspose" if transpose else "Conv"
    inputs = "x, w, b" if bias else "x, w"
    side = 10 if transpose else 6
    text = f"""
    g (float[1, 4, 8, 8] x) => (float[1, 4, {side}, {side}] y) {{
        t = {conv} <kernel_shape = [3, 3], group = {group}> ({inputs})
        y = {op} (t, k)
    }}"""
    w_shape = (4, 4 // group, 3, 3)
    inits = {"w": RNG.normal(size=w_shape).astype(np.float32), "b": RNG.normal(size=4).astype(np.float32),
             "k": RNG.uniform(0.5, 2, size=k_shape).astype(k_dtype)}
    if not bias:
        del inits["b"]
    return model_from_text(text, initializers=inits)


@pytest.mark.parametrize("k_shape", [(4, 1, 1), (1, 4, 1, 1), (), (1,), (1, 1, 1, 1)])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_add_folds_a_per_channel_constant_into_the_bias(k_shape, bias):
    result = assert_rewrite(_conv("Add", k_shape, bias), ["conv-add"], {"conv-add": 1}, produces={"Conv": 1},
                            absent=["Add"])
    assert len(result.model.graph.node[0].input) == 3


@pytest.mark.parametrize("bias", [False, True])
def test_conv_mul_scales_the_weight_and_the_bias(bias):
    result = assert_rewrite(_conv("Mul", (1, 4, 1, 1), bias), ["conv-affine"], {"conv-mul": 1},
                            produces={"Conv": 1}, absent=["Mul"])
    assert len(result.model.graph.node[0].input) == 3  # a bias is always produced


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_a_conv_transpose_folds_along_its_weight_axis_1(op):
    name = f"conv-transpose-{op.lower()}"
    assert_rewrite(_conv(op, (4, 1, 1), bias=True, transpose=True), ["conv-affine"], {name: 1},
                   produces={"ConvTranspose": 1}, absent=[op])


@pytest.mark.parametrize(("model", "reason"), [
    (_conv("Add", (4, 6, 6)), "per output channel"),
    (_conv("Mul", (4,)), "per output channel"),  # [4] broadcasts along the width, not the channels
    (_conv("Mul", (2, 4, 1, 1)), "per output channel"),
    (_conv("Mul", (4, 1, 1), transpose=True, group=2), "grouped ConvTranspose"),
])
def test_what_is_not_one_value_per_output_channel_stays(model, reason):
    result = assert_no_rewrite(model, ["conv-affine"])
    assert any(reason in miss.reason for miss in result.near_misses.values()), result.near_misses


def test_the_simplify_pass_and_apply_fold_the_same_through_the_installed_cli(tmp_path):
    """paddle2onnx's Conv -> Mul -> Add becomes one Conv, by ``simplify --only fold-conv-affine`` and by
    ``apply --pattern conv-affine`` (one pattern family for both)."""
    model = model_from_text("""
    g (float[N, 3, 16, 16] x) => (float[N, 8, 14, 14] y) {
        c = Conv <kernel_shape = [3, 3]> (x, w, b)
        m = Mul (c, s)
        y = Add (m, t)
    }""", initializers={"w": RNG.normal(size=(8, 3, 3, 3)).astype(np.float32),
                        "b": RNG.normal(size=8).astype(np.float32),
                        "s": RNG.uniform(0.5, 2, size=(8, 1, 1)).astype(np.float32),
                        "t": RNG.normal(size=(8, 1, 1)).astype(np.float32)})
    onnx.save(model, tmp_path / "m.onnx")
    done = subprocess.run([CLI, "simplify", "--only", "fold-conv-affine", "m.onnx", "out.onnx", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert op_counts(onnx.load(tmp_path / "out.onnx")) == {"Conv": 1}
    assert '"fold-conv-affine": 2' in done.stdout
    done = subprocess.run([CLI, "apply", "--pattern", "conv-affine", "m.onnx", "applied.onnx"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert op_counts(onnx.load(tmp_path / "applied.onnx")) == {"Conv": 1}
