"""Large reference outputs wait in a scratch file (validation/kept_outputs.py): the values read back are the
outputs onnxruntime gave, before and after their pages are dropped, and validation still finds a mismatch in them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.validation import kept_outputs, validate
from gsrewrite.validation.kept_outputs import KeptOutputs


def test_large_outputs_are_views_of_the_scratch_file_with_the_same_values() -> None:
    rng = np.random.default_rng(0)
    outputs = {"logits": rng.standard_normal((2, 3, 50)).astype(np.float32),
               "ids": np.arange(7, dtype=np.int64).reshape(7, 1), "seq": [np.ones(2)]}
    kept = KeptOutputs(spill_bytes=64)
    spilled = kept.keep(dict(outputs))
    second = kept.keep({"logits": outputs["logits"] * 2})  # a second run lands later in the same file
    for name in ("logits", "ids"):
        assert not spilled[name].flags.owndata and not spilled[name].flags.writeable
        np.testing.assert_array_equal(spilled[name], outputs[name])
        assert spilled[name].dtype == outputs[name].dtype and spilled[name].shape == outputs[name].shape
    assert spilled["seq"] is outputs["seq"]  # a sequence output stays as it is
    KeptOutputs.release(spilled)
    np.testing.assert_array_equal(spilled["logits"], outputs["logits"])  # read back after the pages were dropped
    np.testing.assert_array_equal(second["logits"], outputs["logits"] * 2)
    kept.close()


def test_small_outputs_stay_in_memory() -> None:
    outputs = {"y": np.ones(4, dtype=np.float32)}
    assert KeptOutputs(spill_bytes=1 << 20).keep(outputs) is outputs


def _model(scale: float) -> object:
    weight = numpy_helper.from_array(np.full((64, 4096), scale, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4096])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(("scale", "ok"), [(1.0, True), (1.01, False)])
def test_validation_compares_with_spilled_reference_outputs(monkeypatch: pytest.MonkeyPatch, scale: float,
                                                            ok: bool) -> None:
    monkeypatch.setattr(kept_outputs, "SPILL_BYTES", 1024)  # every run's outputs go to the scratch file
    kept: list[object] = []
    original_keep = KeptOutputs.keep

    def spy(self: KeptOutputs, outputs: dict) -> dict:
        result = original_keep(self, outputs)
        kept.append(result)
        return result

    monkeypatch.setattr(KeptOutputs, "keep", spy)
    report = validate(_model(1.0), _model(scale), input_shapes={"n": 8})
    assert report.ok is ok
    assert kept and all(type(k).__name__ == "_Spilled" for k in kept)
