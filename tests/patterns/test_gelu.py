"""gelu (erf form) and fastgelu (tanh form): associations, constants, targets, must-not-match cases."""

from __future__ import annotations

import numpy as np
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

PRODUCTS = {  # the three ways exporters associate 0.5 * x * p
    "legacy": "xp = Mul (x, p)\n y = Mul (xp, half)",
    "hf": "hx = Mul (half, x)\n y = Mul (hx, p)",
    "dynamo": "hp = Mul (half, p)\n y = Mul (x, hp)",
}


def erf_gelu(product: str = "legacy", scale: str = "div", sqrt2: float = 1.4142135, leak: bool = False,
             opset: int = 17):
    first = "t = Div (x, s)" if scale == "div" else "t = Mul (x, s)"
    outputs = "float[2, 16] y" + (", float[2, 16] e" if leak else "")
    text = f"""
    g (float[2, 16] x) => ({outputs}) {{
        {first}
        e = Erf (t)
        p = Add (e, one)
        {PRODUCTS[product]}
    }}"""
    s = sqrt2 if scale == "div" else 1.0 / sqrt2
    inits = {"s": np.array(s, np.float32), "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    return model_from_text(text, opset=opset, initializers=inits)


def tanh_gelu(cube: str = "pow", product: str = "legacy", opset: int = 17):
    cubed = "x3 = Pow (x, three)" if cube == "pow" else "xx = Mul (x, x)\n x3 = Mul (x, xx)"
    text = f"""
    g (float[2, 16] x) => (float[2, 16] y) {{
        {cubed}
        kx3 = Mul (k, x3)
        s = Add (x, kx3)
        z = Mul (s, c)
        t = Tanh (z)
        p = Add (one, t)
        {PRODUCTS[product]}
    }}"""
    inits = {"three": np.array(3.0, np.float32), "k": np.array(0.044715, np.float32),
             "c": np.array(np.sqrt(2 / np.pi), np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    if cube != "pow":
        del inits["three"]
    return model_from_text(text, opset=opset, initializers=inits)


@pytest.mark.parametrize("product", sorted(PRODUCTS))
@pytest.mark.parametrize("scale", ["div", "mul"])
def test_erf_gelu_every_association(product, scale):
    assert_rewrite(erf_gelu(product, scale), ["gelu-erf"], {"gelu-erf": 1}, produces={"com.microsoft.Gelu": 1},
                   absent=["Erf", "Mul"])


def test_erf_gelu_target_onnx_needs_opset_20():
    assert_no_rewrite(erf_gelu(opset=17), ["gelu-erf"], target="onnx")
    assert_rewrite(erf_gelu(opset=20), ["gelu-erf"], {"gelu-erf": 1}, target="onnx", produces={"Gelu": 1})


def test_erf_gelu_opset_upgrade_on_request():
    from gsrewrite.pipelines import apply

    result = apply(erf_gelu(opset=17), ["gelu"], target="onnx", opset=20)
    assert result.counts == {"gelu-erf": 1}
    assert result.validation.ok
    assert {(o.domain, o.version) for o in result.model.opset_import} >= {("", 20)}


@pytest.mark.parametrize("cube", ["pow", "mul"])
@pytest.mark.parametrize("product", sorted(PRODUCTS))
def test_tanh_gelu(cube, product):
    assert_rewrite(tanh_gelu(cube, product), ["fastgelu"], {"fastgelu": 1}, produces={"com.microsoft.FastGelu": 1},
                   absent=["Tanh"])


def test_tanh_gelu_target_onnx_is_gelu_tanh():
    result = assert_rewrite(tanh_gelu(opset=20), ["gelu"], {"fastgelu": 1}, target="onnx", produces={"Gelu": 1})
    attrs = {a.name: a.s for a in result.model.graph.node[0].attribute}
    assert attrs["approximate"] == b"tanh"


def test_wrong_sqrt2_constant_is_not_fused():
    result = assert_no_rewrite(erf_gelu(sqrt2=1.5), ["gelu"])
    assert "not the constant" in result.near_misses["gelu-erf"].reason


def test_escaping_erf_output_is_not_fused():
    result = assert_no_rewrite(erf_gelu(leak=True), ["gelu"])
    assert "graph output" in result.near_misses["gelu-erf"].reason
