"""Validation against the model's own noise (gsrewrite/validation/noise.py, criteria.Criterion.noise_factor): a fused
kernel that moves the outputs about as much as onnxruntime's own optimizer does is kept; an O(1) difference is
still caught; models that pass the plain rule never pay for the measurement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.validation import noise as noise_module
from gsrewrite.validation.report import grouped_shapes

WIDTH, LAYERS = 128, 8
GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def deep_model(gamma_shift: float = 0.0) -> onnx.ModelProto:
    """8 residual blocks of MatMul + Add + LayerNorm written out (ReduceMean, Sub, Pow, Sqrt, Div, Mul, Add) + Tanh,
    then a head with large weights: logits of magnitude ~4000, whose near-zero elements onnxruntime's own
    LayerNormalization fusion moves by ~1e-3 (more than the default atol). ``gamma_shift`` changes one layer's scale:
    a wrong model."""
    rng = np.random.default_rng(0)
    nodes, inits = [], [numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
                        numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    x = "x"
    for i in range(LAYERS):
        gamma = (1 + 0.1 * rng.standard_normal(WIDTH)).astype(np.float32) + (gamma_shift if i == 3 else 0.0)
        inits += [numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) * 1.5 / np.sqrt(WIDTH))
                                          .astype(np.float32), f"W{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(WIDTH)).astype(np.float32), f"b{i}"),
                  numpy_helper.from_array(gamma.astype(np.float32), f"g{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(WIDTH)).astype(np.float32), f"be{i}")]
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("ReduceMean", [f"a{i}"], [f"mu{i}"], axes=[-1]),
                  helper.make_node("Sub", [f"a{i}", f"mu{i}"], [f"d{i}"]),
                  helper.make_node("Pow", [f"d{i}", "two"], [f"sq{i}"]),
                  helper.make_node("ReduceMean", [f"sq{i}"], [f"var{i}"], axes=[-1]),
                  helper.make_node("Add", [f"var{i}", "eps"], [f"ve{i}"]),
                  helper.make_node("Sqrt", [f"ve{i}"], [f"sd{i}"]),
                  helper.make_node("Div", [f"d{i}", f"sd{i}"], [f"n{i}"]),
                  helper.make_node("Mul", [f"n{i}", f"g{i}"], [f"gn{i}"]),
                  helper.make_node("Add", [f"gn{i}", f"be{i}"], [f"ln{i}"]),
                  helper.make_node("Tanh", [f"ln{i}"], [f"t{i}"]),
                  helper.make_node("Add", [f"t{i}", x], [f"r{i}"])]
        x = f"r{i}"
    inits.append(numpy_helper.from_array((rng.standard_normal((WIDTH, 1000)) * 40).astype(np.float32), "Wo"))
    nodes.append(helper.make_node("MatMul", [x, "Wo"], ["logits"]))
    graph = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                           ["batch", "sequence", WIDTH])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def fused() -> onnx.ModelProto:
    """The deep model with its LayerNorms fused by gsrewrite, unvalidated."""
    result = gsrewrite.apply(deep_model(), patterns=["layernorm"], validate=False)
    assert result.counts.get("layernorm") == LAYERS
    return result.model


def test_a_fused_kernel_within_the_models_own_noise_agrees(fused: onnx.ModelProto) -> None:
    strict = gsrewrite.validate(deep_model(), fused, noise_factor=0)
    assert not strict.ok  # the plain rule alone: the fusion "changes" the model
    report = gsrewrite.validate(deep_model(), fused)
    assert report.ok, report.summary()
    assert report.noise_source is not None and "ORT_ENABLE_ALL" in report.noise_source
    logits = report.outputs[0]
    assert logits.noise_max_abs is not None and logits.noise_max_abs > 1e-4
    assert logits.max_abs is not None and logits.max_abs <= 8 * logits.noise_max_abs
    assert "own noise" in report.summary()


def test_a_wrong_model_is_caught_beyond_the_noise(fused: onnx.ModelProto) -> None:
    report = gsrewrite.validate(deep_model(), deep_model(gamma_shift=0.05))
    assert not report.ok
    logits = report.outputs[0]
    assert logits.noise_max_abs is not None  # measured, and the difference is far beyond it
    assert (logits.max_abs_outside_rtol or 0) > 100 * logits.noise_max_abs
    assert "the model's own noise" in report.summary()


def test_the_noise_is_measured_only_when_a_candidate_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = noise_module.measure_noise
    monkeypatch.setattr("gsrewrite.validation.validator.measure_noise",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    validator = gsrewrite.validation.Validator(deep_model())
    assert validator.check(deep_model()).ok and not calls  # identical: nothing measured
    perturbed = deep_model(gamma_shift=0.05)
    assert not validator.check(perturbed).ok and not validator.check(perturbed).ok
    assert len(calls) == 1  # once per validator


def test_a_summary_names_each_input_once() -> None:
    shapes = {"input_ids": [2, 1], **{f"past_key_values.{i}.{kv}": [2, 3, 16, 64] for i in range(30)
                                      for kv in ("key", "value")}}
    text = grouped_shapes(shapes)
    assert text == "input_ids 2x1, past_key_values.*.key 2x3x16x64 (x30), past_key_values.*.value 2x3x16x64 (x30)"


def test_optimize_keeps_a_fusion_within_the_noise_through_the_installed_script(tmp_path: Path) -> None:
    model = tmp_path / "deep.onnx"
    onnx.save(deep_model(), model)
    runs = {}
    for factor in ("8", "0"):
        out = tmp_path / f"out{factor}.onnx"
        done = subprocess.run([str(GSREWRITE), "optimize", str(model), str(out), "--json",
                               "--noise-factor", factor], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        runs[factor] = json.loads(done.stdout)
    assert runs["8"]["counts"] == {"layernorm": LAYERS} and runs["8"]["validation"]["ok"]
    assert runs["0"]["counts"] == {} and "layernorm" in runs["0"]["dropped"]
    assert len(runs["0"]["dropped"]["layernorm"]) < 1_000
