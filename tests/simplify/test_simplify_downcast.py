"""downcast (opt-in): only where every consumer accepts the narrower type.

Regression: scs4onnx narrows every int64 constant to int32, including Reshape shapes, which onnxruntime
then rejects ("Type 'tensor(int32)' of input parameter ... is invalid").
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from gsrewrite.testing import model_from_text


def dtypes(model: onnx.ModelProto) -> dict[str, int]:
    return {t.name: t.data_type for t in model.graph.initializer}


MODEL = """
g (float[4, 6] x) => (float[2, 3, 4] y, float[2, 6] z, double[6] w) {
    r = Reshape (x, shape)
    y = Transpose <perm = [1, 2, 0]> (r)
    z = Gather <axis = 0> (x, indices)
    f = Cast <to = 11> (wide)
    w = Neg (f)
}"""


def model() -> onnx.ModelProto:
    return model_from_text(MODEL, initializers={
        "shape": np.array([4, 2, 3], np.int64), "indices": np.array([3, 1], np.int64),
        "wide": np.arange(6, dtype=np.float64) / 7})


def test_downcast_narrows_only_where_accepted(simplified):
    result = simplified(model(), "downcast")
    types = dtypes(result.model)
    assert types["shape"] == onnx.TensorProto.INT64  # Reshape takes tensor(int64) only
    assert types["indices"] == onnx.TensorProto.INT32  # Gather's Tind allows int32
    assert types["wide"] == onnx.TensorProto.FLOAT  # read only by a Cast
    ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_downcast_is_opt_in(simplified):
    assert simplified(model()).counts.get("downcast") is None
    result = simplified(model(), downcast=True)
    # with every pass, the same-type Cast is gone first: Neg then reads "wide", whose type it shares
    assert result.counts.get("downcast") == 1
    assert dtypes(result.model)["wide"] == onnx.TensorProto.DOUBLE


def test_values_outside_int32_stay_int64(simplified):
    text = MODEL.replace("double[6] w", "float[2, 6] v").replace(
        "f = Cast <to = 11> (wide)\n    w = Neg (f)", "v = Gather <axis = 0> (x, huge)")
    m = model_from_text(text, initializers={"shape": np.array([4, 2, 3], np.int64),
                                            "indices": np.array([3, 1], np.int64),
                                            "huge": np.array([2**40, 0], np.int64)})
    result = simplified(m, "downcast", validate=False)
    assert dtypes(result.model)["huge"] == onnx.TensorProto.INT64
