"""``gsrewrite validate``: exit codes (0 agree, 1 disagree, 2 bad input), the table, --json."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.cli import main


def _save(model: onnx.ModelProto, path) -> str:
    model.ir_version = 10  # onnxruntime 1.31 reads IR <= 13
    onnx.save(model, path)
    return str(path)


def bias_model(path, delta: float = 0.0, input_name: str = "x") -> str:
    """y = x + b with x: float[batch, 8]; ``delta`` is added to b[3]."""
    bias = np.arange(8, dtype=np.float32)
    bias[3] += delta
    graph = helper.make_graph(
        [helper.make_node("Add", [input_name, "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [numpy_helper.from_array(bias, "b")],
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def embedding_model(path, rows: int = 50) -> str:
    """ids: int64[batch, seq] -> Gather(table[rows, 4])."""
    table = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [numpy_helper.from_array(table, "table")],
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def run(*args: str):
    return CliRunner().invoke(main, ["validate", *args])


def assert_one_line_error(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0]


@pytest.fixture
def models(tmp_path):
    return {
        "a": bias_model(tmp_path / "a.onnx"),
        "b": bias_model(tmp_path / "b.onnx"),
        "bad": bias_model(tmp_path / "bad.onnx", delta=1e-2),
    }


def test_identical_models_exit_0(models):
    result = run(models["a"], models["b"])
    assert result.exit_code == 0, result.output
    assert "OK: 1 output(s) agree" in result.stdout
    assert "max abs" in result.stdout and "verdict" in result.stdout


def test_perturbed_weight_exits_1_with_the_error(models):
    result = run(models["a"], models["bad"])
    assert result.exit_code == 1, result.output
    assert "MISMATCH" in result.stdout
    assert "max abs 0.01" in result.stdout


def test_json_output(models):
    result = run(models["a"], models["bad"], "--json", "--runs", "3", "--seed", "7")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    (out,) = data["outputs"]
    assert data["ok"] is False and data["runs"] == 3 and data["seed"] == 7
    assert out["name"] == "y" and out["verdict"] == "mismatch"
    assert out["max_abs"] == pytest.approx(1e-2, abs=1e-6)
    assert out["mismatch_fraction"] == pytest.approx(1 / 8)
    assert {"max_rel", "cosine", "nan_original", "inf_candidate"} <= out.keys()
    assert len(data["per_run"]) == 3 * len(data["sizes"]) and len(data["sizes"]) >= 2


def test_tolerance_options(models):
    # an element fails only when outside both tolerances: abs 1e-2, rel 1e-2 / |x + 3| (about 3e-3)
    assert run(models["a"], models["bad"], "--atol", "0.02").exit_code == 0
    assert run(models["a"], models["bad"], "--rtol", "0.5").exit_code == 0
    assert run(models["a"], models["bad"], "--atol", "0", "--rtol", "0").exit_code == 1


def test_input_shape_for_dynamic_dims(tmp_path):
    model = embedding_model(tmp_path / "e.onnx")
    result = run(model, model, "--input-shape", "ids:3x40", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["inputs"]["ids"]["shape"] == [3, 40]
    assert data["inputs"]["ids"]["values"] == "uniform integers in [0, 50)"
    assert data["outputs"][0]["shape"] == [3, 40, 4]
    by_dim = json.loads(run(model, model, "--input-shape", "seq=5", "--json").stdout)
    assert by_dim["inputs"]["ids"]["shape"] == [2, 5]


def test_npz_inputs(models, tmp_path):
    np.savez(tmp_path / "in.npz", x=np.ones((4, 8), dtype=np.float32))
    result = run(models["a"], models["bad"], "--inputs", str(tmp_path / "in.npz"), "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["inputs"]["x"] == {"shape": [4, 8], "dtype": "float32", "source": "given"}
    assert sum(r["mismatches"] for r in data["per_run"] if r["size_set"] == "sample") == 4


@pytest.mark.parametrize(
    ("make_args", "words"),
    [
        (lambda m, t: [m["a"], str(t / "nope.onnx")], ["nope.onnx"]),
        (lambda m, t: [m["a"], m["b"], "--input-shape", "x:2xq"], ["bad input shape"]),
        (lambda m, t: [m["a"], m["b"], "--input-shape", "x:2x9"], ["contradicts"]),
        (lambda m, t: [m["a"], m["b"], "--inputs", str(t / "garbage.npz")], ["cannot read inputs"]),
        (lambda m, t: [m["a"], m["b"], "--inputs", str(t / "other.npz")], ["missing input", "x"]),
        (lambda m, t: [m["a"], m["b"], "--inputs", str(t / "absent.npz")], ["not found"]),
        (lambda m, t: [m["a"], bias_model(t / "x2.onnx", input_name="x2")], ["different inputs"]),
        (lambda m, t: [m["a"], _unloadable(t)], ["cannot load the candidate model"]),
    ],
    ids=[
        "missing-model",
        "bad-shape-spec",
        "shape-vs-fixed-dim",
        "bad-npz",
        "npz-missing-input",
        "npz-not-found",
        "different-input-names",
        "onnxruntime-cannot-load",
    ],
)
def test_bad_input_exits_2_with_one_line(models, tmp_path, make_args, words):
    (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04 truncated")
    np.savez(tmp_path / "other.npz", z=np.zeros((1, 8), dtype=np.float32))
    result = run(*make_args(models, tmp_path))
    assert_one_line_error(result, *words)
    assert result.stdout == ""


def _unloadable(tmp_path) -> str:
    model = onnx.load(bias_model(tmp_path / "u.onnx"))
    model.graph.node[0].op_type = "NoSuchOp"
    return _save(model, tmp_path / "u.onnx")
