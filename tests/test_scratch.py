"""Payloads a request makes wait in a scratch file (model_io/scratch.py): read back equal, validated by onnxruntime
from a map of that file, put back into the result before the request ends, and the file removed."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.model_io import save_model
from gsrewrite.model_io.scratch import SPILL_BYTES, is_scratch, spill
from gsrewrite.model_io.weights import inlined, tensor_values, weights_from
from gsrewrite.pipelines import optimize
from gsrewrite.pipelines.options import Source


def test_a_spilled_array_reads_back_equal_and_is_put_back(tmp_path: Path) -> None:
    values = np.random.default_rng(0).standard_normal((600, 500)).astype(np.float32)  # 1.2 MB
    assert values.nbytes >= SPILL_BYTES
    assert spill("w", values) is None  # no request bound: exported as it is
    with weights_from(tmp_path):
        small = spill("s", values[:2])
        tensor = spill("w", values)
        again = spill("v", values * 2)
        assert small is None and tensor is not None and again is not None
        assert is_scratch(tensor) and tensor.data_location == TensorProto.EXTERNAL
        path = next(e.value for e in tensor.external_data if e.key == "location")
        assert not (tmp_path / path).exists()  # never in the user's folder
        with weights_from(tmp_path):  # an inner request shares the file
            np.testing.assert_array_equal(tensor_values(again), values * 2)
        np.testing.assert_array_equal(tensor_values(tensor), values)
        model = helper.make_model(helper.make_graph([], "g", [], [], [tensor]))
        inlined(model)
        kept = model.graph.initializer[0]
        assert not is_scratch(kept) and kept.data_location == TensorProto.DEFAULT
        np.testing.assert_array_equal(numpy_helper.to_array(kept), values)
        files = [f for f in os.listdir(os.path.dirname(_scratch_path(again)))
                 if f.startswith("gsrewrite-scratch-")]
        assert files
        scratch = _scratch_path(again)
    assert not os.path.exists(scratch)  # removed when the request ends


def _scratch_path(tensor: TensorProto) -> str:
    from gsrewrite.model_io.scratch import resolve

    found = resolve(next(e.value for e in tensor.external_data if e.key == "location"))
    assert found is not None
    return found


def _transposed_linear(path: Path) -> np.ndarray:
    """Reshape -> Gemm(transB = 1) -> Reshape: linear-3d-transposed computes W^T, a 2 MB tensor the request makes."""
    rng = np.random.default_rng(1)
    weight = (rng.standard_normal((1024, 512)) / 20).astype(np.float32)  # [N, K]
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.zeros(1024, np.float32), "c"),
             numpy_helper.from_array(np.array([-1, 512], np.int64), "s1"),
             numpy_helper.from_array(np.array([2, 4, 1024], np.int64), "s2")]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["x2"]),
             helper.make_node("Gemm", ["x2", "w", "c"], ["y2"], transB=1),
             helper.make_node("Reshape", ["y2", "s2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 1024])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return weight


def test_a_fused_weight_is_validated_from_the_scratch_file_and_handed_back_inline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gsrewrite.validation import in_memory

    weight = _transposed_linear(tmp_path / "m.onnx")
    seen: list[str] = []
    original = in_memory.in_memory_model

    def spy(model: onnx.ModelProto, data: bytes | None = None) -> object:
        seen.extend(t.name for t in model.graph.initializer if is_scratch(t))
        return original(model, data)

    monkeypatch.setattr(in_memory, "in_memory_model", spy)
    monkeypatch.setattr("gsrewrite.validation.runner.in_memory_model", spy)
    result = optimize(Source.mapped(tmp_path / "m.onnx"), patterns=["linear-3d"])
    assert result.counts.get("linear-3d-transposed") == 1 and result.validation is not None and result.validation.ok
    assert seen  # the candidate reached onnxruntime with the made weight in the scratch file
    made = [t for t in result.model.graph.initializer if t.name not in ("w", "c", "s1", "s2")
            and list(t.dims) == [512, 1024]]
    assert len(made) == 1 and not is_scratch(made[0]) and made[0].data_location == TensorProto.DEFAULT
    np.testing.assert_array_equal(numpy_helper.to_array(made[0]), weight.T)
    save_model(result.model, tmp_path / "out.onnx", weights_dir=result.weights_dir)
    import onnxruntime as ort

    x = np.random.default_rng(2).standard_normal((2, 4, 512)).astype(np.float32)
    (y,) = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ weight.T, rtol=1e-4, atol=1e-4)
    assert not [f for f in os.listdir(tmp_path) if "scratch" in f]
