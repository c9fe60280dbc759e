"""``gsrewrite validate``: exit codes (0 agree, 1 disagree, 2 bad input), the table, --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
        (lambda m, t: [m["a"], m["b"], "--input-shape", "x:2xq"], ["not a dim"]),
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


# --- the criterion options, through the console script users run ------------------------------------------------
GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _cli(cwd, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GSREWRITE), "validate", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _linear(path, weight: np.ndarray, head: str = "ArgMax") -> str:
    """logits = x[200, 16] @ weight; label = ArgMax(logits) (``head``: "ArgMax" or "" for logits only)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [200, weight.shape[1]])]
    if head:
        nodes.append(helper.make_node("ArgMax", ["logits"], ["label"], axis=-1, keepdims=0))
        outputs.append(helper.make_tensor_value_info("label", TensorProto.INT64, [200]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [200, 16])], outputs,
                              [numpy_helper.from_array(weight.astype(np.float32), "w")])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_cosine_judges_float_outputs_as_compress_does(tmp_path):
    """A weight scaled by 1.01: every element is outside atol/rtol, the direction is the same (cosine 1)."""
    weight = np.random.default_rng(0).standard_normal((16, 4))
    original, scaled = _linear(tmp_path / "a.onnx", weight, ""), _linear(tmp_path / "b.onnx", weight * 1.01, "")
    assert _cli(tmp_path, original, scaled).returncode == 1
    done = _cli(tmp_path, original, scaled, "--cosine", "0.999")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cosine >= 0.999" in done.stdout and "top-1 100%" in done.stdout  # 2-D logits: top-1 beside cosine
    data = json.loads(_cli(tmp_path, original, scaled, "--cosine", "0.999", "--json").stdout)
    assert data["criterion"]["min_cosine"] == 0.999 and data["outputs"][0]["top1"] == 1.0
    infinite = weight.copy()
    infinite[0, 0] = np.inf
    worse = _cli(tmp_path, original, _linear(tmp_path / "c.onnx", infinite, ""), "--cosine", "-1", "--max-abs", "1e30")
    assert worse.returncode == 1 and "NaN/inf differ at" in worse.stdout and "non-finite" in worse.stdout


def test_min_agreement_and_min_top1_judge_labels_and_class_scores(tmp_path):
    """Close logits, a slightly different weight: a share of the 200 labels changes."""
    rng = np.random.default_rng(0)
    weight = 1.0 + 0.01 * rng.standard_normal((16, 10))
    original = _linear(tmp_path / "a.onnx", weight)
    candidate = _linear(tmp_path / "b.onnx", weight + 0.002 * rng.standard_normal(weight.shape))
    strict = _cli(tmp_path, original, candidate, "--cosine", "0.99", "--json")
    assert strict.returncode == 1
    by_name = {o["name"]: o for o in json.loads(strict.stdout)["outputs"]}
    agreement = by_name["label"]["agreement"]
    assert 0.5 < agreement < 1.0 and by_name["label"]["failed"] == ["agreement"] and by_name["logits"]["ok"]
    assert by_name["logits"]["top1"] == agreement  # the same rows keep their class in both outputs
    relaxed = _cli(tmp_path, original, candidate, "--cosine", "0.99", "--min-agreement", str(agreement - 0.01))
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    assert f"{100 * agreement:.3f}".rstrip("0").rstrip(".") + "%" in relaxed.stdout  # the agree column
    top1 = _cli(tmp_path, original, candidate, "--cosine", "0.99", "--min-agreement", "0", "--min-top1", "0.999")
    assert top1.returncode == 1 and "top-1 class kept in" in top1.stdout and "need >= 99.9%" in top1.stdout
    bad = _cli(tmp_path, original, candidate, "--min-agreement", "1.5")
    assert bad.returncode == 2 and "--min-agreement" in bad.stderr and bad.stdout == ""
