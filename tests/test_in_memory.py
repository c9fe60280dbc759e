"""An in-memory model reaches onnxruntime without its large weights serialized (validation/in_memory.py): the
weights onnxruntime runs must be the proto's, exactly."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.validation import validate
from gsrewrite.validation.in_memory import MIN_TOTAL_BYTES, in_memory_model


def _model(weight: np.ndarray, bias: np.ndarray, *, duplicate: bool = False) -> onnx.ModelProto:
    rows, cols = weight.shape
    initializers = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b"),
                    numpy_helper.from_array(np.array([1, cols], dtype=np.int64), "shape")]
    if duplicate:
        initializers.append(numpy_helper.from_array(weight, "w"))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
         helper.make_node("Reshape", ["a", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((1024, 2560)).astype(np.float32)  # 10 MiB: above MIN_TOTAL_BYTES
    assert weight.nbytes >= MIN_TOTAL_BYTES
    return weight, rng.standard_normal(2560).astype(np.float16).astype(np.float32)


def test_large_weights_are_passed_as_arrays_over_the_protos_bytes() -> None:
    weight, bias = _weights()
    split = in_memory_model(_model(weight, bias))
    assert split is not None and split.names == ["w", "b"]
    assert len(split.data) < 4096  # the graph alone
    np.testing.assert_array_equal(split.arrays[0], weight)
    np.testing.assert_array_equal(split.arrays[1], bias)
    stub = onnx.load_from_string(split.data).graph.initializer[0]
    assert stub.name == "w" and stub.data_location == TensorProto.EXTERNAL and not stub.raw_data
    small = onnx.load_from_string(split.data).graph.initializer[2]
    assert small.name == "shape" and numpy_helper.to_array(small).tolist() == [1, 2560]


def test_small_models_and_duplicate_names_stay_serialized() -> None:
    weight, bias = _weights()
    assert in_memory_model(_model(weight[:16], bias)) is None  # too few bytes to gain anything
    split = in_memory_model(_model(weight, bias, duplicate=True))
    assert split is None or "w" not in split.names  # onnxruntime reports the duplicate as it is


def test_validation_runs_the_weights_of_each_proto(monkeypatch) -> None:
    from gsrewrite.validation import runner

    passed: list[list[str]] = []

    def spy(model: onnx.ModelProto, data: bytes | None = None) -> object:
        split = in_memory_model(model, data)
        passed.append(split.names if split is not None else [])
        return split

    monkeypatch.setattr(runner, "in_memory_model", spy)
    weight, bias = _weights()
    original = _model(weight, bias)
    assert validate(original, _model(weight.copy(), bias.copy())).ok
    changed = weight.copy()
    changed[7, 1234] += 1.0  # one element of 2.6 million
    report = validate(original, _model(changed, bias))
    assert not report.ok
    # both models of both comparisons went to onnxruntime as arrays, and the original once more for the failing
    # candidate (its own noise, at onnxruntime's optimizations)
    assert passed == [["w", "b"]] * 5
    assert report.outputs[0].max_abs is not None and report.outputs[0].max_abs > 0.01


def test_an_initializer_that_is_also_a_graph_input_keeps_its_default() -> None:
    weight, bias = _weights()

    def model(w: np.ndarray) -> onnx.ModelProto:
        proto = _model(w, bias)
        proto.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
        return proto

    assert validate(model(weight), model(weight.copy())).ok
    changed = weight.copy()
    changed[0, 0] += 5.0
    assert not validate(model(weight), model(changed)).ok


def test_given_the_serialized_model_the_arrays_are_views_of_its_payloads() -> None:
    weight, bias = _weights()
    model = _model(weight, bias)
    data = model.SerializeToString()
    split = in_memory_model(model, data)
    assert split is not None and split.names == ["w", "b"]
    buffer = np.frombuffer(data, np.uint8)
    assert all(np.shares_memory(array, buffer) for array in split.arrays)  # no copy of the weights
    np.testing.assert_array_equal(split.arrays[0], weight)
    np.testing.assert_array_equal(split.arrays[1], bias)
    other = _model(weight + 1, bias).SerializeToString()[:-1]  # not this model's bytes (not even well formed)
    fallback = in_memory_model(model, other)
    assert fallback is not None
    np.testing.assert_array_equal(fallback.arrays[0], weight)  # copied from the proto, never read from `other`


def test_payload_offsets_of_damaged_bytes_are_none_or_within_the_bytes() -> None:
    from gsrewrite.model_io.wire import initializer_payloads

    weight, bias = _weights()
    data = _model(weight[:64], bias).SerializeToString()
    rng = np.random.default_rng(1)
    cuts = [*range(0, 200), *rng.integers(0, len(data), 300).tolist()]
    for cut in cuts:
        for damaged in (data[:cut], data[:cut] + bytes(rng.integers(0, 256, 8, dtype=np.uint8))):
            payloads = initializer_payloads(damaged)  # never raises
            for where in payloads or []:
                assert where is None or (where[0] >= 0 and where[0] + where[1] <= len(damaged))
    assert initializer_payloads(data) is not None


def test_copied_payloads_live_in_a_scratch_map_that_onnxruntime_has_copied() -> None:
    """Without serialized bytes each payload is copied into a scratch file and viewed through a memory map; once
    the session exists its pages are dropped from memory, and the session still computes with the weights."""
    import mmap

    import onnxruntime as ort

    weight, bias = _weights(3)
    split = in_memory_model(_model(weight, bias))
    assert split is not None and len(split.maps) == 1 and isinstance(split.maps[0], mmap.mmap)
    assert all(not array.flags.owndata for array in split.arrays)  # views of the map, not copies
    options = ort.SessionOptions()
    split.add_to(options)
    session = ort.InferenceSession(split.data, options, providers=["CPUExecutionProvider"])
    split.session_created()
    x = np.random.default_rng(4).standard_normal((1, 1024)).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_allclose(y, x @ weight + bias, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(split.arrays[0], weight)  # read back from the file after the pages were dropped
