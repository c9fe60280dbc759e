"""skip-layernorm (both devices) and rmsnorm: positive cases, both targets, and what must not fuse."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gsrewrite.errors import PatternError, UsageError
from gsrewrite.patterns.pattern import parse_pattern_data
from gsrewrite.pipelines import apply
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
    result = assert_rewrite(skip_ln(), ["skip-layernorm"], {"skip-layernorm": 1}, device="gpu",
                            produces={"com.microsoft.SkipLayerNormalization": 1}, absent=["Add"])
    assert list(result.model.graph.node[0].output) == ["y"]


def test_skip_layernorm_leaves_a_reused_sum_alone():
    """Pre-LN models reuse the sum as the next residual: Add + LayerNormalization is faster on CPU there."""
    for device, pattern in (("gpu", "skip-layernorm"), ("cpu", "skip-layernorm-sum")):
        result = assert_no_rewrite(skip_ln(sum_used=True), ["skip-layernorm"], device=device)
        assert "graph output" in result.near_misses[pattern].reason


def test_skip_layernorm_needs_same_shapes():
    for device, pattern in (("gpu", "skip-layernorm"), ("cpu", "skip-layernorm-sum")):
        result = assert_no_rewrite(skip_ln(shapes=("2, 4, 8", "1, 4, 8")), ["skip-layernorm"], device=device)
        assert "not the same 3-D shape" in result.near_misses[pattern].reason


def test_skip_layernorm_is_ort_only():
    for device, pattern in (("gpu", "skip-layernorm"), ("cpu", "skip-layernorm-sum")):
        result = assert_no_rewrite(skip_ln(), ["skip-layernorm"], target="onnx", device=device)
        assert "ort" in result.skipped[pattern]


def test_on_cpu_the_residual_becomes_a_sum_and_skip_layernorm_is_skipped():
    result = assert_rewrite(skip_ln(), ["skip-layernorm"], {"skip-layernorm-sum": 1},
                            produces={"Sum": 1, "LayerNormalization": 1, "com.microsoft.SkipLayerNormalization": 0},
                            absent=["Add"])
    assert "gpu only" in result.skipped["skip-layernorm"] and "--device gpu" in result.skipped["skip-layernorm"]
    gpu = apply(skip_ln(), ["skip-layernorm"], device="gpu", validate=False)
    assert "cpu only" in gpu.skipped["skip-layernorm-sum"] and gpu.counts.get("skip-layernorm") == 1


def test_an_unknown_device_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        apply(skip_ln(), ["skip-layernorm"], device="tpu", validate=False)


def _bert_block() -> onnx.ModelProto:
    """A post-LN residual with a dynamic batch and sequence (what exporters write): projection + bias + skip."""
    text = """
    g (float[batch, seq, 8] x, float[batch, seq, 8] r) => (float[batch, seq, 8] y) {
        m = MatMul (x, w)
        t = Add (bias, m)
        s = Add (t, r)
        y = LayerNormalization <axis = -1, epsilon = 0.000001> (s, gamma, beta)
    }"""
    inits = {"w": RNG.normal(size=(8, 8)).astype(np.float32), "bias": RNG.normal(size=8).astype(np.float32),
             "gamma": GAMMA, "beta": BETA}
    return model_from_text(text, initializers=inits)


def _ops_onnxruntime_runs(model: onnx.ModelProto, tmp_path) -> set[str]:
    """The op types of the graph onnxruntime executes after its own optimizations (ORT_ENABLE_ALL, CPU)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "ort_optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return {n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node}


def test_the_sum_form_keeps_onnxruntime_from_fusing_its_slow_skip_layernorm(tmp_path):
    """onnxruntime fuses Add + Add + LayerNormalization into SkipLayerNormalization by itself (its CPU kernel is
    several times slower); the projection bias joins the Sum, and onnxruntime leaves Sum + LayerNormalization."""
    model = _bert_block()
    assert "SkipLayerNormalization" in _ops_onnxruntime_runs(model, tmp_path)  # the premise
    result = assert_rewrite(model, ["skip-layernorm"], {"skip-layernorm-sum": 1, "skip-layernorm-sum-bias": 1},
                            produces={"Sum": 1, "LayerNormalization": 1, "MatMul": 1}, absent=["Add"])
    total = next(n for n in result.model.graph.node if n.op_type == "Sum")
    assert len(total.input) == 3 and "bias" in total.input
    ran = _ops_onnxruntime_runs(result.model, tmp_path)
    assert "SkipLayerNormalization" not in ran and "LayerNormalization" in ran


def test_a_sum_bias_must_run_along_the_last_axis():
    text = """
    g (float[2, 4, 8] x, float[2, 4, 8] r) => (float[2, 4, 8] y) {
        t = Add (x, bias)
        s = Add (t, r)
        y = LayerNormalization <axis = -1, epsilon = 0.000001> (s, gamma, beta)
    }"""
    inits = {"bias": RNG.normal(size=(4, 1)).astype(np.float32), "gamma": GAMMA, "beta": BETA}
    result = assert_rewrite(model_from_text(text, initializers=inits), ["skip-layernorm"], {"skip-layernorm-sum": 1},
                            produces={"Sum": 1, "Add": 1})
    assert "skip-layernorm-sum-bias" not in result.counts


@pytest.mark.parametrize("devices", [["tpu"], [], "cpu"])
def test_a_pattern_file_names_known_devices_only(devices):
    entry = {"name": "p", "devices": devices, "match": "m (x) => (y) { y = Relu (x) }",
             "replace": "m (x) => (y) { y = Relu (x) }"}
    with pytest.raises(PatternError, match="devices"):
        parse_pattern_data({"family": "f", "pattern": [entry]}, "test.toml")


def test_devices_default_to_both_and_are_inherited_from_the_base():
    base = {"name": "p", "devices": ["gpu"], "match": "m (x) => (y) { y = Relu (x) }",
            "replace": "m (x) => (y) { y = Relu (x) }"}
    plain = {"name": "q", "match": "m (x) => (y) { y = Sigmoid (x) }", "replace": "m (x) => (y) { y = Sigmoid (x) }"}
    derived = {"name": "r", "base": "p", "replace": "m (x) => (y) { y = Relu (x) }"}
    patterns = parse_pattern_data({"family": "f", "pattern": [base, plain, derived]}, "test.toml")
    assert [p.devices for p in patterns] == [("gpu",), ("cpu", "gpu"), ("gpu",)]


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
    from gsrewrite.pipelines import apply

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
                                {"skip-layernorm": 1, "skip-layernorm-bias": 1}, absent=["Add"], device="gpu")
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
    result = assert_rewrite(model_from_text(text, initializers=inits), ["skip-layernorm"], {"skip-layernorm": 1},
                            device="gpu")
    assert "skip-layernorm-bias" not in result.counts
    on_cpu = assert_rewrite(model_from_text(text, initializers=inits), ["skip-layernorm"], {"skip-layernorm-sum": 1})
    assert "skip-layernorm-sum-bias" not in on_cpu.counts
