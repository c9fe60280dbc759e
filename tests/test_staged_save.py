"""StagedSave (gsrewrite.model_io.staging): the result's bytes are written while onnxruntime validates them, and the
file is put in place only when the command's result is exactly those bytes."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.errors import OutputError
from gsrewrite.model_io import saving
from gsrewrite.model_io.staging import StagedSave

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "bert-tiny.onnx"


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
        size = staged.save(model, data)
    assert size == len(data)
    assert out.read_bytes() == data
    assert _temp_files(tmp_path) == []


def test_staged_bytes_are_dropped_when_the_result_is_another_model(tmp_path: Path) -> None:
    first, final = _model(2.0), _model(3.0)
    first_data, final_data = first.SerializeToString(), final.SerializeToString()
    out = tmp_path / "out.onnx"
    with StagedSave(str(out)) as staged:
        staged.begin(first, first_data)
        staged.begin(final, final_data)  # a later candidate (bisection): only the first is staged
        size = staged.save(final, final_data)
    assert out.read_bytes() == final_data and size == len(final_data)
    assert _temp_files(tmp_path) == []
    # a result whose bytes are unknown (nothing was validated) is serialized by the save itself
    other = tmp_path / "other.onnx"
    with StagedSave(str(other)) as staged:
        staged.begin(first, first_data)
        staged.save(final, None)
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
        staged.save(model, data)
    assert out.read_bytes() == b"old content"
    assert _temp_files(tmp_path) == []


def test_bytes_that_would_be_written_differently_are_not_staged(tmp_path: Path) -> None:
    model = _model(2.0)
    data = model.SerializeToString()
    out = tmp_path / "out.onnx"
    with StagedSave(str(out), external_data=True, size_threshold=16) as staged:
        staged.begin(model, data)
        assert _temp_files(tmp_path) == []  # external data: the bytes given are not what gets written
        staged.save(model, data)
    assert (tmp_path / "out.onnx.data").stat().st_size == 64 * 4
    assert onnx.load(out, load_external_data=False).graph.initializer[0].data_location == TensorProto.EXTERNAL


@pytest.mark.parametrize("command", ["apply", "simplify", "optimize"])
def test_the_pipelines_stage_the_bytes_they_validate(command: str, tmp_path: Path) -> None:
    """Inside ``with StagedSave``, a pipeline's validated candidate is written ahead and its bytes are the file's;
    no callback is passed: the pipeline hands the bytes down to model_io."""
    import gsrewrite

    out = tmp_path / "out.onnx"
    run = {"apply": lambda: gsrewrite.apply(str(EXAMPLE), ["layernorm"]), "simplify": lambda: gsrewrite.simplify(
        _model(2.0)), "optimize": lambda: gsrewrite.optimize(_model(2.0))}[command]
    with StagedSave(str(out)) as staged:
        result = run()
        assert result.validation.ok and result.changed and result.serialized is not None
        assert len(_temp_files(tmp_path)) == 1  # staged while validation ran
        size = staged.save(result.model, result.serialized)
    assert out.read_bytes() == result.serialized and size == len(result.serialized)
    assert onnx.load(out) == result.model and _temp_files(tmp_path) == []


def test_outside_a_staged_save_nothing_is_written_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gsrewrite

    monkeypatch.chdir(tmp_path)
    result = gsrewrite.optimize(_model(2.0))
    assert result.serialized is not None and list(tmp_path.iterdir()) == []
