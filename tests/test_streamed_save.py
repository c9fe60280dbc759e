"""Writing a model whose weights are references (loaded weightless): payloads copied from their files in chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.model_io import streamed
from gsrewrite.model_io.weightless import load_weightless


def _model(path: Path, external: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}") for i in range(3)]
    small = numpy_helper.from_array(np.arange(2, dtype=np.int64), "small")
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("MatMul", ["a", "w1"], ["b"]),
             helper.make_node("MatMul", ["b", "w2"], ["y"]), helper.make_node("Shape", ["y"], ["s"]),
             helper.make_node("Add", ["s", "small"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64]),
                               helper.make_tensor_value_info("z", TensorProto.INT64, [2])], [*weights, small])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    model.metadata_props.add(key="k", value="v")
    if external:
        onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=1024)
    else:
        onnx.save(model, path)
    return model


def _plain(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the explicit DEFAULT data_location onnx's external-data loader leaves behind cleared."""
    for tensor in model.graph.initializer:
        if tensor.HasField("data_location") and tensor.data_location == TensorProto.DEFAULT:
            tensor.ClearField("data_location")
    return model


@pytest.mark.parametrize("external", [False, True])
def test_inline_write_restores_every_payload(tmp_path: Path, external: bool) -> None:
    _model(tmp_path / "m.onnx", external)
    original = onnx.load(tmp_path / "m.onnx")  # every payload inline
    loaded = load_weightless(tmp_path / "m.onnx")
    assert sum(t.data_location == TensorProto.EXTERNAL for t in loaded.graph.initializer) == 3
    out = tmp_path / "out" / "inline.onnx"
    out.parent.mkdir()
    with open(out, "wb") as f:
        written = streamed.write_inline(loaded, f, str(tmp_path))
    assert written == out.stat().st_size
    assert onnx.load(out).SerializeToString() == _plain(original).SerializeToString()


def test_external_write_aligns_payloads_and_runs(tmp_path: Path) -> None:
    import onnxruntime as ort

    original = _model(tmp_path / "m.onnx", external=False)
    loaded = load_weightless(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    with open(out / "x.onnx", "wb") as f, open(out / "x.onnx.data", "wb") as data:
        size = streamed.write_external(loaded, f, data, "x.onnx.data", str(tmp_path), threshold=1024)
    assert size == (out / "x.onnx.data").stat().st_size
    written = onnx.load(out / "x.onnx", load_external_data=False)
    offsets = [int({e.key: e.value for e in t.external_data}["offset"]) for t in written.graph.initializer
               if t.data_location == TensorProto.EXTERNAL]
    assert len(offsets) == 3 and all(o % streamed.ALIGNMENT == 0 for o in offsets)
    feed = {"x": np.ones((2, 64), np.float32)}
    expected = ort.InferenceSession(original.SerializeToString()).run(None, feed)
    got = ort.InferenceSession(str(out / "x.onnx")).run(None, feed)
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_source_shorter_than_its_tensors_is_an_error(tmp_path: Path) -> None:
    _model(tmp_path / "m.onnx", external=True)
    loaded = load_weightless(tmp_path / "m.onnx")
    data = tmp_path / "weights.bin"
    data.write_bytes(data.read_bytes()[:-8])
    with open(tmp_path / "out.onnx", "wb") as f, pytest.raises(ValueError, match="shorter"):
        streamed.write_inline(loaded, f, str(tmp_path))


def test_onnxruntime_runs_a_weightless_model_from_its_folder(tmp_path: Path) -> None:
    """Validation hands onnxruntime a weightless-loaded model as bytes plus the folder its references point into:
    the weights stay in the file (mapped by onnxruntime), and the outputs are the model's."""
    from gsrewrite.model_io.source import Source
    from gsrewrite.validation import validate

    _model(tmp_path / "m.onnx", external=False)
    loaded = load_weightless(tmp_path / "m.onnx")
    source = Source(loaded, weights_dir=str(tmp_path))
    candidate = Source(load_weightless(tmp_path / "m.onnx"), weights_dir=str(tmp_path), role="candidate")
    report = validate(source, candidate)
    assert report.ok and report.outputs[0].max_abs == 0
    from gsrewrite.errors import CannotValidateError

    with pytest.raises(CannotValidateError):  # without the folder, the references resolve nowhere
        validate(Source(loaded), candidate)
