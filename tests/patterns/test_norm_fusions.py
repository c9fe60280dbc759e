"""skip-layernorm and rmsnorm: positive cases, both targets, and what must not fuse."""

from __future__ import annotations

import numpy as np
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

RNG = np.random.default_rng(3)
GAMMA = RNG.normal(size=8).astype(np.float32)
BETA = RNG.normal(size=8).astype(np.float32)


def skip_ln(sum_used: bool = False, shapes: tuple[str, str] = ("2, 4, 8", "2, 4, 8")):
    outputs = "float[2, 4, 8] y" + (", float[2, 4, 8] s" if sum_used else "")
    text = f"""
    g (float[{shapes[0]}] a, float[{shapes[1]}] b) => ({outputs}) {{
        s = Add (b, a)
        y = LayerNormalization <axis = -1, epsilon = 0.000001> (s, gamma, beta)
    }}"""
    return model_from_text(text, opset=17, initializers={"gamma": GAMMA, "beta": BETA})


def test_skip_layernorm():
    result = assert_rewrite(skip_ln(), ["skip-layernorm"], {"skip-layernorm": 1},
                            produces={"com.microsoft.SkipLayerNormalization": 1}, absent=["Add"])
    assert list(result.model.graph.node[0].output) == ["y"]


def test_skip_layernorm_leaves_a_reused_sum_alone():
    """Pre-LN models reuse the sum as the next residual: Add + LayerNormalization is faster on CPU there."""
    result = assert_no_rewrite(skip_ln(sum_used=True), ["skip-layernorm"])
    assert "graph output" in result.near_misses["skip-layernorm"].reason


def test_skip_layernorm_needs_same_shapes():
    result = assert_no_rewrite(skip_ln(shapes=("2, 4, 8", "1, 4, 8")), ["skip-layernorm"])
    assert "not the same 3-D shape" in result.near_misses["skip-layernorm"].reason


def test_skip_layernorm_is_ort_only():
    result = assert_no_rewrite(skip_ln(), ["skip-layernorm"], target="onnx")
    assert "ort" in result.skipped["skip-layernorm"]


RMS_FORMS = {
    "legacy": "r = Sqrt (v)\n i = Div (one, r)\n n = Mul (x, i)",
    "dynamo": "r = Sqrt (v)\n i = Reciprocal (r)\n n = Mul (i, x)",
    "div": "r = Sqrt (v)\n n = Div (x, r)",
    "pow": "i = Pow (v, mhalf)\n n = Mul (x, i)",
}


def rmsnorm(form: str, axes: str = "[-1]", opset: int = 17):
    text = f"""
    g (float[2, 4, 8] x) => (float[2, 4, 8] y) {{
        sq = Pow (x, two)
        ms = ReduceMean <axes = {axes}> (sq)
        v = Add (ms, eps)
        {RMS_FORMS[form]}
        y = Mul (scale, n)
    }}"""
    inits = {"two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32), "scale": GAMMA,
             "one": np.array(1.0, np.float32), "mhalf": np.array(-0.5, np.float32)}
    return model_from_text(text, opset=opset, initializers={k: v for k, v in inits.items() if k in text})


@pytest.mark.parametrize("form", sorted(RMS_FORMS))
def test_rmsnorm_every_spelling(form):
    assert_rewrite(rmsnorm(form), ["rmsnorm"], {"rmsnorm": 1}, produces={"SimplifiedLayerNormalization": 1},
                   absent=["ReduceMean", "Pow"])


def test_rmsnorm_target_onnx_is_rmsnormalization_23():
    assert_no_rewrite(rmsnorm("legacy"), ["rmsnorm"], target="onnx")
    from gsrewrite.engine import apply

    result = apply(rmsnorm("legacy"), ["rmsnorm"], target="onnx", opset=23)
    assert result.counts == {"rmsnorm": 1} and result.validation.ok
    assert [n.op_type for n in result.model.graph.node] == ["RMSNormalization"]


def test_rmsnorm_over_a_middle_axis_is_not_fused():
    result = assert_no_rewrite(rmsnorm("legacy", axes="[1]"), ["rmsnorm"])
    assert "trailing" in result.near_misses["rmsnorm"].reason


def test_skip_layernorm_takes_the_projection_bias_from_either_input():
    """SkipLayerNormalization(a, b) = LN(a + b): the bias Add may feed either of the two interchangeable inputs."""
    for first in ("t", "r"):
        second = "r" if first == "t" else "t"
        text = f"""
        g (float[2, 4, 8] x, float[2, 4, 8] r) => (float[2, 4, 8] y) {{
            m = MatMul (x, w)
            t = Add (m, bias)
            s = Add ({first}, {second})
            y = LayerNormalization <axis = -1, epsilon = 0.000001> (s, gamma, beta)
        }}"""
        inits = {"w": RNG.normal(size=(8, 8)).astype(np.float32), "bias": RNG.normal(size=8).astype(np.float32),
                 "gamma": GAMMA, "beta": BETA}
        result = assert_rewrite(model_from_text(text, initializers=inits), ["skip-layernorm"],
                                {"skip-layernorm": 1, "skip-layernorm-bias": 1}, absent=["Add"])
        node = next(n for n in result.model.graph.node if n.op_type == "SkipLayerNormalization")
        assert node.input[4] == "bias"


def test_a_value_reused_to_compute_the_skip_input_is_not_swallowed():
    """wav2vec2: the projected features feed the bias Add AND (through a conv) the residual skip input."""
    text = """
    g (float[2, 4, 8] x) => (float[2, 4, 8] y) {
        m = MatMul (x, w)
        t = Add (m, bias)
        r = Relu (t)
        s = Add (t, r)
        y = LayerNormalization <axis = -1, epsilon = 0.000001> (s, gamma, beta)
    }"""
    inits = {"w": RNG.normal(size=(8, 8)).astype(np.float32), "bias": RNG.normal(size=8).astype(np.float32),
             "gamma": GAMMA, "beta": BETA}
    result = assert_rewrite(model_from_text(text, initializers=inits), ["skip-layernorm"], {"skip-layernorm": 1})
    assert "skip-layernorm-bias" not in result.counts
