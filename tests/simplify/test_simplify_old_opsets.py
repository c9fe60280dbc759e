"""Opset 9 spellings (axes, starts/ends and pads as attributes) are simplified just the same."""

from __future__ import annotations

import onnx
from onnx import TensorProto as T
from onnx import helper

from gsrewrite.testing import op_counts


def opset9_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["i0"], value=helper.make_tensor("v", T.INT64, [], [0])),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b"], ["bu"], axes=[0]),
        helper.make_node("Constant", [], ["rest"], value=helper.make_tensor("r", T.INT64, [2], [2, 4])),
        helper.make_node("Concat", ["bu", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r1"]),
        helper.make_node("Slice", ["r1"], ["sl"], starts=[0], ends=[1000000], axes=[1]),
        helper.make_node("Unsqueeze", ["sl"], ["u1"], axes=[0]),
        helper.make_node("Squeeze", ["u1"], ["q1"], axes=[0]),
        helper.make_node("Pad", ["q1"], ["p"], pads=[0] * 6),
        helper.make_node("Transpose", ["p"], ["t1"], perm=[0, 2, 1]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
        helper.make_node("Relu", ["t2"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", T.FLOAT, ["batch", 2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=5)


def test_opset9_model_collapses_to_reshape_relu(simplified):
    result = simplified(opset9_model())
    assert op_counts(result.model) == {"Reshape": 1, "Relu": 1}
    reshape = result.model.graph.node[0]
    assert not [a for a in reshape.attribute if a.name == "allowzero"]  # Reshape-5 has no allowzero
