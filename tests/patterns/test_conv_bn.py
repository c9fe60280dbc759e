"""conv-bn: BatchNormalization folded into Conv weights, with and without a Conv bias."""

from __future__ import annotations

import numpy as np
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

RNG = np.random.default_rng(1)


def conv_bn(bias: bool = True, group: int = 1, leak: bool = False, training: bool = False, opset: int = 17):
    conv_inputs = "x, w, b" if bias else "x, w"
    outputs = "float[1, 4, 6, 6] y" + (", float[1, 4, 6, 6] c" if leak else "")
    mode = ", training_mode = 1" if training else ""
    bn_outputs = "y, rm, rv" if training else "y"
    text = f"""
    g (float[1, 4, 8, 8] x) => ({outputs}) {{
        c = Conv <kernel_shape = [3, 3], group = {group}> ({conv_inputs})
        {bn_outputs} = BatchNormalization <epsilon = 0.001{mode}> (c, scale, shift, mean, var)
    }}"""
    inits = {
        "w": RNG.normal(size=(4, 4 // group, 3, 3)).astype(np.float32),
        "b": RNG.normal(size=4).astype(np.float32),
        "scale": RNG.uniform(0.5, 2, size=4).astype(np.float32),
        "shift": RNG.normal(size=4).astype(np.float32),
        "mean": RNG.normal(size=4).astype(np.float32),
        "var": RNG.uniform(0.5, 2, size=4).astype(np.float32),
    }
    if not bias:
        del inits["b"]
    return model_from_text(text, opset=opset, initializers=inits)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("group", [1, 2])
def test_folds(bias, group):
    result = assert_rewrite(conv_bn(bias, group), ["conv-bn"], {"conv-bn": 1}, produces={"Conv": 1},
                            absent=["BatchNormalization"])
    conv = result.model.graph.node[0]
    assert len(conv.input) == 3  # a bias is always produced
    assert {a.name: a.i for a in conv.attribute if a.name == "group"}.get("group", 1) == group


def test_escaping_conv_output_is_not_folded():
    assert_no_rewrite(conv_bn(leak=True), ["conv-bn"])


def test_training_mode_is_not_folded():
    result = assert_no_rewrite(conv_bn(training=True, opset=15), ["conv-bn"])
    assert result.near_misses["conv-bn"].reason
