"""Option values no command can use are refused with one line (exit 2) before any work, nothing on stdout and no
output written, through the installed console script: ``--seed -1``, an ``--input-shape`` of the wrong rank or
against a static dim (in the analysis commands too), a size past any tensor's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GSREWRITE), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def _model(path: Path) -> Path:
    """y = Relu(Identity(x)), x [batch, 4] (the Identity gives the rewriting commands something to do)."""
    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    assert all(word in done.stderr for word in words), done.stderr


@pytest.mark.parametrize("command", [["validate", "m.onnx", "m.onnx"], ["optimize", "m.onnx", "out.onnx"],
                                     ["apply", "--pattern", "all", "m.onnx", "out.onnx"],
                                     ["simplify", "m.onnx", "out.onnx"]])
def test_a_negative_seed_is_one_line(tmp_path: Path, command: list[str]) -> None:
    _model(tmp_path / "m.onnx")
    _refused(_run(*command, "--seed", "-1", cwd=tmp_path), "--seed", "-1")
    assert not (tmp_path / "out.onnx").exists()


def test_a_negative_seed_is_a_usage_error_in_the_library(tmp_path: Path) -> None:
    from gsrewrite.errors import UsageError
    from gsrewrite.pipelines import ValidationOptions
    from gsrewrite.validation import validate

    with pytest.raises(UsageError, match="seed"):
        ValidationOptions(seed=-1)
    with pytest.raises(UsageError, match="seed"):
        validate(_model(tmp_path / "m.onnx"), tmp_path / "m.onnx", seed=-1)
