"""``extract``: the sub-model between named tensors, self-contained and equal to the full model on those tensors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import gsrewrite
from gsrewrite.errors import UsageError
from gsrewrite.testing import model_from_text

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
RNG = np.random.default_rng(0)

MODEL = """
g (float[N, 8] x, float[N, 8] unused) => (float[N, 4] y) {
    a = MatMul (x, w1)
    b = Relu (a)
    c = MatMul (b, w2)
    d = Add (c, bias)
    y = Sigmoid (d)
}"""


def _model() -> onnx.ModelProto:
    return model_from_text(MODEL, initializers={"w1": RNG.normal(size=(8, 16)).astype(np.float32),
                                                "w2": RNG.normal(size=(16, 4)).astype(np.float32),
                                                "bias": RNG.normal(size=(4,)).astype(np.float32)})


def test_the_middle_of_a_model_is_cut_with_only_its_weights_and_checked():
    result = gsrewrite.extract(_model(), ["b"], ["d"])
    graph = result.model.graph
    assert [n.op_type for n in graph.node] == ["MatMul", "Add"]
    assert sorted(t.name for t in graph.initializer) == ["bias", "w2"]
    assert [i.name for i in graph.input] == ["b"] and graph.input[0].type.tensor_type.elem_type == 1
    assert [d.dim_value or d.dim_param for d in graph.output[0].type.tensor_type.shape.dim] == ["N", 4]
    assert result.validated and result.ok and result.comparisons[0].max_abs == 0.0
    onnx.checker.check_model(result.model, full_check=True)


def test_an_output_that_needs_another_graph_input_is_refused_naming_it():
    with pytest.raises(UsageError, match=r"'x'.*add them to --inputs"):
        gsrewrite.extract(_model(), ["b"], ["y", "a"])


def test_unknown_names_are_refused():
    with pytest.raises(UsageError, match="no tensor named 'nope'"):
        gsrewrite.extract(_model(), ["nope"], ["y"])


def test_the_cli_writes_the_sub_model_and_refuses_bad_names(tmp_path: Path):
    onnx.save(_model(), tmp_path / "m.onnx")
    done = subprocess.run([str(GSREWRITE), "extract", "m.onnx", "--inputs", "x", "--outputs", "b,d", "-o", "s.onnx",
                           "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["nodes"] == 4 and report["outputs"] == ["b", "d"]
    assert [o.name for o in onnx.load(tmp_path / "s.onnx").graph.output] == ["b", "d"]
    bad = subprocess.run([str(GSREWRITE), "extract", "m.onnx", "--inputs", "zz", "--outputs", "y", "-o", "t.onnx"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and not (tmp_path / "t.onnx").exists()


def test_the_output_is_never_the_input_data_file(tmp_path: Path):
    """-o naming the --input-data file it reads: one line, exit 2, the file unchanged (it was overwritten)."""
    onnx.save(_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "d.npz", x=np.ones((2, 8), np.float32), unused=np.ones((2, 8), np.float32))
    before = (tmp_path / "d.npz").read_bytes()
    done = subprocess.run([str(GSREWRITE), "extract", "m.onnx", "--inputs", "x", "--outputs", "y", "-o", "d.npz",
                           "--input-data", "d.npz"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error:") and "--input-data" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (tmp_path / "d.npz").read_bytes() == before
