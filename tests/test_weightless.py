"""Loading without weights: the graph and shapes as the full loader gives them, large payloads left in the file
and read back (memory-mapped) byte for byte; the checks of the full loader still apply."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from malformed import len_field
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.errors import GsrewriteError
from gsrewrite.model_io import load_model
from gsrewrite.model_io.weightless import INLINE_LIMIT, external_range, load_weightless


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 128)).astype(np.float32)
    big[0, :8] = 0
    inits = [numpy_helper.from_array(big, "w"), numpy_helper.from_array(np.array([2, -1], np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((128,)).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_large_payloads_stay_in_the_file_and_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    light, full = load_weightless(path), load_model(path)
    assert [n.op_type for n in light.graph.node] == [n.op_type for n in full.graph.node]
    by_name = {t.name: t for t in light.graph.initializer}
    assert by_name["w"].data_location == TensorProto.EXTERNAL and not by_name["w"].raw_data
    assert by_name["shape"].raw_data  # small constants stay inline (shape arithmetic reads them)
    assert INLINE_LIMIT >= 128 * 4 and by_name["b"].raw_data
    found = external_range(by_name["w"], str(tmp_path))
    assert found is not None
    where, offset, length, dtype = found
    values = np.fromfile(where, dtype=dtype, count=length // dtype.itemsize, offset=offset)
    expected = numpy_helper.to_array({t.name: t for t in full.graph.initializer}["w"])
    assert np.array_equal(values.reshape(64, 128), expected)
    assert light.ByteSize() < full.ByteSize() / 4


def test_profile_from_a_path_equals_profile_of_the_loaded_model(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    from_path, loaded = gsrewrite.profile(path), gsrewrite.profile(load_model(path))
    assert from_path.to_dict() == loaded.to_dict()
    assert from_path.weights.zeros == 8 and from_path.weights.zero_blocks == 2


def test_external_data_models_profile_their_weights_memory_mapped(tmp_path: Path) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save(_model(), path, save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
              size_threshold=1024)
    profile = gsrewrite.profile(path)
    assert profile.weights.zeros == 8 and profile.params == 64 * 128 + 2 + 128


@pytest.mark.parametrize("payload", [b"", b"\x08\x07\x3a\xff\xff", b"not a model at all"])
def test_malformed_files_get_the_full_loaders_errors(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(payload)
    with pytest.raises(GsrewriteError):
        load_weightless(path)


def test_shapes_check_runs_the_model_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--check runs onnxruntime: the weights must be loaded, not left behind a relative location."""
    from click.testing import CliRunner

    from gsrewrite.cli import main

    path = tmp_path / "models" / "m.onnx"
    path.parent.mkdir()
    onnx.save(_model(), path)
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(main, ["shapes", str(path), "--check"])
    assert done.exit_code == 0 and "0 differ" in done.output, done.output


@pytest.mark.parametrize("case", ["short_payload", "raw_data_twice", "sub_byte_type"])
def test_large_inline_tensors_the_file_states_oddly_get_the_full_loaders_answer(tmp_path: Path, case: str) -> None:
    """A large inline payload whose length differs from its declaration is refused as raw_data (the full loader's
    message, not "external data in the model file"); a tensor with raw_data twice is read as protobuf reads it
    (the last); a 4-bit tensor's payload is sized as the full loader sizes it (half a byte per element)."""
    rows = 64
    if case == "sub_byte_type":
        tensor = TensorProto(name="w", data_type=TensorProto.UINT4, dims=[rows, 256], raw_data=bytes(rows * 128))
        extra = b""
    else:
        tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[rows, 64],
                             raw_data=bytes(8000 if case == "short_payload" else rows * 64 * 4))
        # raw_data (field 9) once more, the right length: protobuf keeps the last one
        extra = len_field(9, bytes(range(256)) * rows) if case == "raw_data_twice" else b""
    nodes = [helper.make_node("Identity", ["w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", tensor.data_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    graph_bytes = graph.SerializeToString() + len_field(5, tensor.SerializeToString() + extra)
    model.ClearField("graph")
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString() + len_field(7, graph_bytes))
    if case == "short_payload":
        with pytest.raises(GsrewriteError) as full:
            load_model(path)
        with pytest.raises(GsrewriteError) as light:
            load_weightless(path)
        assert type(light.value) is type(full.value) and str(light.value) == str(full.value)
        assert "raw_data" in str(light.value)
        return
    full_model, light_model = load_model(path), load_weightless(path)
    stored = light_model.graph.initializer[0]
    if stored.data_location == TensorProto.EXTERNAL:  # left in the file: its bytes are the tensor's
        found = external_range(stored, str(tmp_path))
        assert found is not None
        _, offset, length, _ = found
        stored_bytes = path.read_bytes()[offset:offset + length]
    else:
        stored_bytes = stored.raw_data
    assert stored_bytes == full_model.graph.initializer[0].raw_data


@pytest.mark.parametrize("external", [False, True])
def test_a_file_system_that_cannot_map_files_still_profiles(tmp_path: Path, external: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Where mmap is refused, the weightless load reads the file and the sparsity scan reads each weight's
    range: the same model, the same profile (sparsity included)."""
    import mmap

    path = tmp_path / "m.onnx"
    onnx.save(_model(), path, save_as_external_data=external, location="w.bin", size_threshold=1024)
    expected = gsrewrite.profile(path).to_dict()
    light = load_weightless(path)

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(19, "No such device")

    monkeypatch.setattr(mmap, "mmap", refuse)
    assert load_weightless(path) == light
    profile = gsrewrite.profile(path)
    assert profile.to_dict() == expected and profile.weights.zeros == 8
