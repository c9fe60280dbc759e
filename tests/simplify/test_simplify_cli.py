"""``gsrewrite simplify`` and ``gsrewrite passes list`` from the command line."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from gsrewrite.cli import main
from gsrewrite.testing import model_from_text, op_counts

RNG = np.random.default_rng(4)


@pytest.fixture
def model_path(tmp_path):
    model = model_from_text("""
    g (float[batch, 64] x) => (float[batch, 64] y) {
        a = Identity (x)
        scale = Constant <value = float[1] {2.0}> ()
        b = Mul (a, scale)
        [mm1] c = MatMul (b, w1)
        d = MatMul (b, w2)
        y = Add (c, d)
    }""", initializers={"w1": RNG.normal(size=(64, 64)).astype(np.float32)} | {
        "w2": RNG.normal(size=(64, 64)).astype(np.float32)})
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return path


def run(*args: str) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_simplify_writes_a_validated_model(model_path, tmp_path):
    out = tmp_path / "out.onnx"
    result = run("simplify", model_path, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["validation"]["ok"] is True
    assert data["counts"]["eliminate-noops"] == 1
    assert data["after"]["nodes"] < data["before"]["nodes"]
    assert op_counts(onnx.load(out)) == {"Mul": 1, "MatMul": 2, "Add": 1}


def test_human_report_has_the_before_after_table(model_path, tmp_path):
    result = run("simplify", model_path, "-o", tmp_path / "out.onnx", "--no-validate")
    assert result.exit_code == 0, result.output
    assert "Before / after" in result.output and "parameters" in result.output and "Identity" in result.output
    assert "Validation" not in result.output


def test_unknown_pass_is_one_line_and_writes_nothing(model_path, tmp_path):
    out = tmp_path / "out.onnx"
    result = run("simplify", model_path, "-o", out, "--skip", "no-such-pass")
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: unknown pass 'no-such-pass'")
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_refuses_to_overwrite_the_input(model_path):
    result = run("simplify", model_path, "-o", model_path)
    assert result.exit_code == 2 and "refusing to overwrite" in result.output


def test_external_data_and_extractions(model_path, tmp_path):
    out = tmp_path / "out.onnx"
    result = run("simplify", model_path, "-o", out, "--external-data", "--size-threshold", "0",
                 "--extract-constant", "w1", "--extract-op", "mm1", "--json")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out.onnx.data").exists()
    from gsrewrite import load_model

    assert len(load_model(out).graph.initializer) == 3
    saved = np.load(tmp_path / "out.w1.npy")
    assert saved.shape == (64, 64)
    single = onnx.load(tmp_path / "out.mm1.onnx")
    assert op_counts(single) == {"MatMul": 1}
    assert sorted(json.loads(result.output)["extracted"]) == sorted([str(tmp_path / "out.w1.npy"),
                                                                       str(tmp_path / "out.mm1.onnx")])


def test_unknown_extraction_writes_nothing(model_path, tmp_path):
    out = tmp_path / "out.onnx"
    result = run("simplify", model_path, "-o", out, "--extract-constant", "nope")
    assert result.exit_code == 2 and "no constant named 'nope'" in result.output
    assert not out.exists()


def test_input_shape_fixes_the_result(model_path, tmp_path):
    out = tmp_path / "out.onnx"
    result = run("simplify", model_path, "-o", out, "--input-shape", "x:3x64")
    assert result.exit_code == 0, result.output
    dims = [d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [3, 64]


def test_passes_list(tmp_path):
    result = run("passes", "list", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert {"fold-constants", "eliminate-dead-code", "fold-shapes", "deduplicate-constants",
            "eliminate-common-subexpressions", "fuse-conv-bn"} <= set(rows)
    assert rows["downcast"]["default"] is False and rows["fold-constants"]["default"] is True
    assert "Simplify passes" in run("passes", "list").output
