"""apply end to end: validation bisects to a guilty pattern, CLI errors, JSON report, pattern files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner

from gsrewrite.cli import main
from gsrewrite.patterns import PatternRegistry
from gsrewrite.pipelines import apply
from gsrewrite.testing import model_from_text

PATTERNS = '''
family = "toy"

[[pattern]]
name = "good-double-neg"
description = "Neg(Neg(x)) -> Identity-free x * 1 (correct)"
match = "g (x) => (y) { n = Neg (x)  y = Neg (n) }"
replace = "g (x) => (y) { y = Abs (x) }"

[[pattern]]
name = "relu-to-sigmoid"
description = "a deliberately wrong rewrite"
match = "g (x) => (y) { y = Relu (x) }"
replace = "g (x) => (y) { y = Sigmoid (x) }"
'''


def toy_model() -> onnx.ModelProto:
    # Abs(x) == Neg(Neg(x)) only for x >= 0: feed it a Relu output so the "good" pattern is correct here
    return model_from_text("""
    g (float[4, 8] x) => (float[4, 8] y, float[4, 8] z) {
        r = Relu (x)
        n = Neg (r)
        y = Neg (n)
        z = Relu (x)
    }""")


def _registry(tmp_path: Path) -> PatternRegistry:
    path = tmp_path / "toy.toml"
    path.write_text(PATTERNS)
    registry = PatternRegistry()
    registry.add_file(path)
    return registry


def test_validation_drops_the_guilty_pattern_and_keeps_the_rest(tmp_path):
    result = apply(toy_model(), ["toy"], registry=_registry(tmp_path))
    assert list(result.dropped) == ["relu-to-sigmoid"]
    assert result.counts == {"good-double-neg": 1}
    assert result.validation.ok
    assert "Sigmoid" not in {n.op_type for n in result.model.graph.node}


def test_the_validated_bytes_belong_to_the_final_model(tmp_path):
    result = apply(toy_model(), ["toy"], registry=_registry(tmp_path))  # bisection made a second candidate
    assert result.serialized is not None and onnx.load_from_string(result.serialized) == result.model
    bad = apply(toy_model(), ["relu-to-sigmoid"], registry=_registry(tmp_path))  # falls back to the original
    assert not bad.changed and onnx.load_from_string(bad.serialized) == bad.model
    assert apply(toy_model(), ["toy"], registry=_registry(tmp_path), validate=False).serialized is None


def test_without_validation_the_wrong_rewrite_goes_through(tmp_path):
    result = apply(toy_model(), ["toy"], registry=_registry(tmp_path), validate=False)
    assert result.counts["relu-to-sigmoid"] == 2 and result.validation is None


def _write(tmp_path: Path, model: onnx.ModelProto) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return path


def test_cli_apply_pattern_file_json_and_dropped(tmp_path):
    (tmp_path / "toy.toml").write_text(PATTERNS)
    model = _write(tmp_path, toy_model())
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(main, ["apply", str(model), "-o", str(out), "--pattern-file",
                                       str(tmp_path / "toy.toml"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"] == {"good-double-neg": 1}
    assert "relu-to-sigmoid" in report["dropped"]
    assert report["matches"][0]["replaced_ops"] == ["Neg", "Neg"]
    assert out.exists() and onnx.load(str(out)).graph.node


def test_cli_unknown_pattern_suggests_the_closest_names(tmp_path):
    model = _write(tmp_path, toy_model())
    result = CliRunner().invoke(main, ["apply", str(model), "-o", str(tmp_path / "o.onnx"), "-p", "layernrom"])
    assert result.exit_code == 2
    assert "unknown pattern or family 'layernrom' (did you mean 'layernorm'" in result.stderr
    assert "patterns list" in result.stderr and "rotary" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.onnx").exists()


def test_cli_refuses_to_overwrite_the_input(tmp_path):
    model = _write(tmp_path, toy_model())
    before = model.read_bytes()
    result = CliRunner().invoke(main, ["apply", str(model), "-o", str(model)])
    assert result.exit_code == 2 and "--in-place" in result.stderr
    assert model.read_bytes() == before


def test_cli_explain_names_the_failing_node(tmp_path):
    rng = np.random.default_rng(0)
    model = model_from_text("""
    g (float[2, 4, 8] x) => (float[2, 4, 8] y) {
        mean = ReduceMean <axes = [-1]> (x)
        d = Sub (x, mean)
        sq = Pow (d, three)
        var = ReduceMean <axes = [-1]> (sq)
        ve = Add (var, eps)
        std = Sqrt (ve)
        n = Div (d, std)
        y = Mul (n, scale)
    }""", initializers={"three": np.array(3.0, np.float32), "eps": np.array(1e-5, np.float32),
                        "scale": rng.normal(size=8).astype(np.float32)})
    path = _write(tmp_path, model)
    result = CliRunner().invoke(main, ["explain", str(path), "-p", "layernorm", "--json"])
    assert result.exit_code == 0, result.output
    miss = json.loads(result.stdout)["near_misses"]["layernorm"]
    assert miss["reason"].endswith("is not the constant 2") and miss["depth"] >= 2
