"""merge-reshape-transpose: the dynamo exporter's K^T (merge, swap, split) becomes one Transpose."""

from __future__ import annotations

import numpy as np
import onnx

from gsrewrite.testing import model_from_text, op_counts

KT = """
g (float[batch, 4, seq, 8] k) => (float[batch, 4, 8, seq] y) {
    s = Shape (k)
    last = Slice (s, minus2, minus1)
    lead = Slice (s, lowest, minus2)
    merged = Concat <axis = 0> (minus1, last, eight)
    m = Reshape (k, merged)
    t = Transpose <perm = [0, 2, 1]> (m)
    split = Concat <axis = 0> (lead, eight, last)
    y = Reshape (t, split)
}"""
CONSTANTS = {"minus2": np.array([-2], np.int64), "minus1": np.array([-1], np.int64),
             "lowest": np.array([-(2**63)], np.int64), "eight": np.array([8], np.int64)}


def test_merge_swap_split_is_one_transpose(simplified):
    result = simplified(model_from_text(KT, opset=18, initializers=CONSTANTS), "merge-reshape-transpose",
                        "eliminate-dead-code")
    assert op_counts(result.model) == {"Transpose": 1}
    perm = onnx.helper.get_attribute_value(result.model.graph.node[0].attribute[0])
    assert list(perm) == [0, 1, 3, 2]


def test_reshape_that_mixes_dims_is_kept(simplified):
    model = model_from_text("""
    g (float[2, 4, 6] x) => (float[2, 6, 4] y) {
        m = Reshape (x, to_8_6)
        t = Transpose <perm = [1, 0]> (m)
        y = Reshape (t, to_2_6_4)
    }""", initializers={"to_8_6": np.array([8, 6], np.int64), "to_2_6_4": np.array([2, 6, 4], np.int64)})
    result = simplified(model, "merge-reshape-transpose")
    assert op_counts(result.model) == {"Reshape": 2, "Transpose": 1}


def test_intermediate_with_another_reader_is_kept(simplified):
    text = KT.replace("=> (float[batch, 4, 8, seq] y)", "=> (float[batch, 4, 8, seq] y, float[?, 8, seq] t)")
    result = simplified(model_from_text(text, opset=18, initializers=CONSTANTS), "merge-reshape-transpose")
    assert op_counts(result.model)["Transpose"] == 1 and op_counts(result.model)["Reshape"] == 2
