"""StagedSave: the CLI writes the result's bytes while onnxruntime validates them, and puts the file in place only
when the command's result is exactly those bytes."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.cli._background_save import StagedSave
from gsrewrite.errors import OutputError
from gsrewrite.model_io import saving


def _model(scale: float) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.full((64,), scale, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Mul", ["t", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_staged_bytes_are_written_before_the_result_is_known_and_put_in_place(tmp_path: Path) -> None:
    model = _model(2.0)
    data = model.SerializeToString()
    out = tmp_path / "out.onnx"
    with StagedSave(str(out)) as staged:
        staged.begin(model, data)
        assert len(_temp_files(tmp_path)) == 1 and not out.exists()  # staged, not in place yet
        size, value = staged.finish(model, data, lambda: "report")
    assert (size, value) == (len(data), "report")
    assert out.read_bytes() == data
    assert _temp_files(tmp_path) == []


def test_staged_bytes_are_dropped_when_the_result_is_another_model(tmp_path: Path) -> None:
    first, final = _model(2.0), _model(3.0)
    first_data, final_data = first.SerializeToString(), final.SerializeToString()
    out = tmp_path / "out.onnx"
    with StagedSave(str(out)) as staged:
        staged.begin(first, first_data)
        staged.begin(final, final_data)  # a later candidate (bisection): only the first is staged
        size, _ = staged.finish(final, final_data, lambda: None)
    assert out.read_bytes() == final_data and size == len(final_data)
    assert _temp_files(tmp_path) == []
    # a result whose bytes are unknown (nothing was validated) is serialized by the save itself
    other = tmp_path / "other.onnx"
    with StagedSave(str(other)) as staged:
        staged.begin(first, first_data)
        staged.finish(final, None, lambda: None)
    assert onnx.load(other) == final and _temp_files(tmp_path) == []


def test_a_failing_command_leaves_the_old_output_and_no_temp_file(tmp_path: Path) -> None:
    model = _model(2.0)
    out = tmp_path / "out.onnx"
    out.write_bytes(b"old content")
    with pytest.raises(RuntimeError, match="validation crashed"), StagedSave(str(out)) as staged:
        staged.begin(model, model.SerializeToString())
        raise RuntimeError("validation crashed")
    assert out.read_bytes() == b"old content"
    assert _temp_files(tmp_path) == []


def test_a_failed_staged_write_is_an_output_error_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(saving.os, "fsync", broken_fsync)  # replacing a file fsyncs the new content first
    model = _model(2.0)
    data = model.SerializeToString()
    out = tmp_path / "out.onnx"
    out.write_bytes(b"old content")
    with pytest.raises(OutputError, match="simulated I/O error"), StagedSave(str(out)) as staged:
        staged.begin(model, data)
        staged.finish(model, data, lambda: None)
    assert out.read_bytes() == b"old content"
    assert _temp_files(tmp_path) == []


def test_bytes_that_would_be_written_differently_are_not_staged(tmp_path: Path) -> None:
    model = _model(2.0)
    data = model.SerializeToString()
    out = tmp_path / "out.onnx"
    with StagedSave(str(out), external_data=True, size_threshold=16) as staged:
        staged.begin(model, data)
        assert _temp_files(tmp_path) == []  # external data: the bytes given are not what gets written
        staged.finish(model, data, lambda: None)
    assert (tmp_path / "out.onnx.data").stat().st_size == 64 * 4
    assert onnx.load(out, load_external_data=False).graph.initializer[0].data_location == TensorProto.EXTERNAL


@pytest.mark.parametrize("command", ["simplify", "optimize"])
def test_the_library_hands_over_the_bytes_it_validated(command: str) -> None:
    calls: list[tuple[onnx.ModelProto, bytes]] = []
    from gsrewrite.pipelines.optimize import optimize_model
    from gsrewrite.pipelines.simplify import simplify_model

    run = {"simplify": simplify_model, "optimize": optimize_model}[command]
    result = run(_model(2.0), validation={}, on_serialized=lambda model, data: calls.append((model, data)))
    assert result.validation.ok and result.changed
    assert calls and calls[-1][1] is result.serialized and calls[-1][0] is result.model
    assert onnx.load_from_string(calls[-1][1]) == result.model
