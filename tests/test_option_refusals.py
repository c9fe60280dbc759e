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


def _static(path: Path) -> Path:
    """y = Relu(x), x [2, 4]: every dim static."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("command", ["shapes", "profile", "memory", "validate"])
def test_an_input_shape_the_model_cannot_take_is_refused_by_the_analysis_commands_too(tmp_path: Path,
                                                                                      command: str) -> None:
    _model(tmp_path / "m.onnx")
    _static(tmp_path / "s.onnx")
    cases = [("m.onnx", "x:2x3x4", ("rank 2",)), ("s.onnx", "x:3x4", ("fixed at 2", "not 3"))]
    if command != "validate":  # a symbolic dim where the model has a static one (validation needs sizes)
        cases.append(("s.onnx", "x:2,seq", ("fixed at 4", "not seq")))
    for model, spec, words in cases:
        args = [command, model, *([model] if command == "validate" else []), "--input-shape", spec]
        _refused(_run(*args, cwd=tmp_path), *(words if command != "validate" else ()))
    if command == "shapes":
        assert _run("shapes", "s.onnx", "--input-shape", "x:2,seq", "--input-shape", "seq=4",
                    cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("command", ["shapes", "profile", "memory", "compute-graph", "validate", "bench"])
def test_a_size_past_any_tensor_is_refused_before_anything_is_printed(tmp_path: Path, command: str) -> None:
    _model(tmp_path / "m.onnx")
    extra = {"validate": ["m.onnx"], "compute-graph": ["-o", "c.onnx", "--shape-engine", "c.json"]}.get(command, [])
    for spec in ("batch=" + "9" * 400, f"batch={2**62 + 1}", "x:" + "9" * 30 + ",4", "x:batch*" + "9" * 30 + ",4"):
        _refused(_run(command, "m.onnx", *extra, "--input-shape", spec, cwd=tmp_path), "--input-shape")
    assert not (tmp_path / "c.onnx").exists()


def test_a_size_past_any_tensor_is_a_usage_error_in_the_library() -> None:
    from gsrewrite.errors import UsageError
    from gsrewrite.shapes.input_shapes import as_input_shapes

    for given in ({"batch": 2**70}, {"x": [2, 2**63]}, {"x": ["batch*" + "9" * 30]}):
        with pytest.raises(UsageError, match="2\\*\\*62"):
            as_input_shapes(given)
    assert as_input_shapes({"batch": 2**62}).bindings == {"batch": 2**62}


@pytest.mark.parametrize("command", [["validate", "m.onnx", "m.onnx"], ["bench", "m.onnx"],
                                     ["shapes", "--check", "m.onnx"], ["optimize", "m.onnx", "out.onnx"]])
def test_a_size_over_the_memory_budget_is_one_line_before_any_input_set(tmp_path: Path, command: list[str]) -> None:
    _model(tmp_path / "m.onnx")
    budget = ["--max-memory", "1GB"] if command[0] in ("validate", "optimize") else []
    _refused(_run(*command, "--input-shape", f"batch={2**62}", *budget, cwd=tmp_path), "input 'x'", "memory budget")
    assert not (tmp_path / "out.onnx").exists()
