"""layernorm: every spelling exporters use, and the cases that must not fuse."""

from __future__ import annotations

import numpy as np
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

RNG = np.random.default_rng(0)
H = 8


def ln_model(*, opset: int = 17, square: str = "pow", divide: str = "div", bias: bool = True,
             swap: bool = False, axes: str = "[-1]", eps: float = 1e-6, exponent: float = 2.0,
             leak: bool = False) -> object:
    """A decomposed LayerNorm over the last axis of x[2, 4, H], in the spelling the options choose."""
    reduce = (lambda src, out: f"{out} = ReduceMean <axes = {axes}> ({src})") if opset < 18 else (
        lambda src, out: f"{out} = ReduceMean ({src}, axes)")
    sq = {"pow": "sq = Pow (d, two)", "mul": "sq = Mul (d, d)"}[square]
    norm = {"div": "n = Div (d, std)", "recip": "r = Reciprocal (std)\n n = Mul (d, r)" if not swap
            else "r = Reciprocal (std)\n n = Mul (r, d)"}[divide]
    scale = "sn = Mul (scale, n)" if swap else "sn = Mul (n, scale)"
    add_eps = "ve = Add (eps, var)" if swap else "ve = Add (var, eps)"
    last = ("y = Add (bias, sn)" if swap else "y = Add (sn, bias)") if bias else "y = Identity (sn)"
    outputs = "float[2, 4, 8] y" + (", float[2, 4, 8] leak" if leak else "")
    extra = "leak = Relu (d)" if leak else ""
    text = f"""
    ln (float[2, 4, 8] x) => ({outputs}) {{
        {reduce("x", "mean")}
        d = Sub (x, mean)
        {sq}
        {reduce("sq", "var")}
        {add_eps}
        std = Sqrt (ve)
        {norm}
        {scale}
        {last}
        {extra}
    }}"""
    inits = {"two": np.array(exponent, np.float32), "eps": np.array(eps, np.float32),
             "scale": RNG.normal(size=H).astype(np.float32), "bias": RNG.normal(size=H).astype(np.float32)}
    if opset >= 18:
        inits["axes"] = np.array(eval(axes), np.int64)
    if not bias:
        del inits["bias"]
    if square != "pow":
        del inits["two"]
    return model_from_text(text, opset=opset, initializers=inits)


@pytest.mark.parametrize("opset", [14, 17, 18])
@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("divide", ["div", "recip"])
def test_fuses_every_spelling(opset, square, divide):
    model = ln_model(opset=opset, square=square, divide=divide)
    result = assert_rewrite(model, ["layernorm"], {"layernorm": 1}, produces={"LayerNormalization": 1},
                            absent=["ReduceMean", "Sqrt"])
    node = result.model.graph.node[0]
    attrs = {a.name: a for a in node.attribute}
    assert (attrs["axis"].i if "axis" in attrs else -1) == -1  # -1 is the default, which saving leaves out
    assert attrs["epsilon"].f == pytest.approx(1e-6)  # captured from the graph


def test_operand_order_is_the_matchers_job():
    assert_rewrite(ln_model(swap=True, divide="recip"), ["layernorm"], {"layernorm": 1})


def test_without_bias():
    result = assert_rewrite(ln_model(bias=False), ["layernorm"], {"layernorm": 1})
    assert len(result.model.graph.node[0].input) == 2  # x, scale: the optional bias is left out


def test_positive_axes_are_normalized():
    assert_rewrite(ln_model(axes="[2]"), ["layernorm"], {"layernorm": 1}, produces={"LayerNormalization": 1})


def test_target_onnx_below_opset_17_is_skipped_with_reason():
    result = assert_no_rewrite(ln_model(opset=14), ["layernorm"], target="onnx")
    assert "needs opset 17" in result.skipped["layernorm"]


def test_escaping_intermediate_is_not_fused():
    result = assert_no_rewrite(ln_model(leak=True), ["layernorm"])
    assert "also used by" in result.near_misses["layernorm"].reason


def test_wrong_constant_is_not_fused():
    result = assert_no_rewrite(ln_model(exponent=3.0), ["layernorm"])
    assert "not the constant 2" in result.near_misses["layernorm"].reason


def test_non_trailing_axes_are_not_fused():
    result = assert_no_rewrite(ln_model(axes="[1]"), ["layernorm"])
    assert "trailing" in result.near_misses["layernorm"].reason
