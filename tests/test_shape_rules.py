"""Each shape rule against onnxruntime: one small model per op (dynamic dims N, H, W), run at three sizes with
every tensor as an output; every tensor's expression must evaluate to the shape onnxruntime produced."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.pipelines.shape_check import check_shapes
from gsrewrite.shapes.walk import infer_symbolic

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def c(name: str, values, dtype=np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def model(nodes, inits=(), opset=18, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["N", 6, "H", "W"])],
                              [helper.make_tensor_value_info(o, F, None) for o in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


CASES = {
    "split_num_outputs": model([helper.make_node("Split", ["x"], ["y", "z"], axis=2, num_outputs=2)],
                               outputs=("y", "z")),
    "split_sizes": model([helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1)], [c("s", [2, 4])],
                         outputs=("y", "z")),
    "slice_negative_step": model([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
                                 [c("st", [-1]), c("en", [-1000]), c("ax", [2]), c("sp", [-2])]),
    "slice_from_end": model([helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])],
                            [c("st", [1, 0]), c("en", [-1, 2**62]), c("ax", [3, 2])]),
    "pad": model([helper.make_node("Pad", ["x", "p"], ["y"])], [c("p", [0, 0, 1, 2, 0, 0, 3, 0])]),
    "tile": model([helper.make_node("Tile", ["x", "r"], ["y"])], [c("r", [1, 2, 1, 3])]),
    "expand": model([helper.make_node("ReduceMean", ["x", "a"], ["m"], keepdims=1),
                     helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Expand", ["m", "s"], ["y"])],
                    [c("a", [2, 3])]),
    "resize_sizes": model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "two"], ["t"]),
                           helper.make_node("Resize", ["x", "", "", "t"], ["y"], mode="nearest")],
                          [c("two", [1, 1, 2, 2])]),
    "resize_scales": model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear")],
                           [c("sc", [1, 1, 2, 3], np.float32)]),
    "flatten": model([helper.make_node("Flatten", ["x"], ["y"], axis=2)]),
    "depth_to_space": model([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=1)]),
    "space_to_depth": model([helper.make_node("Pad", ["x", "p"], ["q"]),
                             helper.make_node("SpaceToDepth", ["q"], ["y"], blocksize=1)],
                            [c("p", [0, 0, 0, 0, 0, 0, 0, 0])]),
    "topk_argmax": model([helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=2),
                          helper.make_node("ArgMax", ["x"], ["am"], axis=3, keepdims=0)], [c("k", [1])],
                         outputs=("y",)),
    "gather_negative": model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [c("i", [[-1, 0], [2, 3]])]),
    "gather_elements": model([helper.make_node("Slice", ["x", "st", "en", "ax"], ["q"]),
                              helper.make_node("GatherElements", ["x", "q64"], ["y"], axis=1),
                              helper.make_node("Cast", ["q"], ["q64"], to=I64)],
                             [c("st", [0]), c("en", [2]), c("ax", [1])]),
    "gather_nd": model([helper.make_node("GatherND", ["x", "i"], ["y"])], [c("i", [[[0, 5]], [[0, 1]]])]),
    "gather_nd_batch_dims": model([
        helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "z", "one"], ["n"]),
        helper.make_node("Concat", ["n", "rest"], ["is"], axis=0),
        helper.make_node("ConstantOfShape", ["is"], ["i"], value=helper.make_tensor("v", I64, [1], [0])),
        helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)],
        [c("z", [0]), c("one", [1]), c("rest", [3, 2])]),
    "reduce_axes_input": model([helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)], [c("a", [-1, 1])]),
    "reduce_all": model([helper.make_node("ReduceMax", ["x"], ["y"], keepdims=1)]),
    "squeeze_unsqueeze": model([helper.make_node("Unsqueeze", ["x", "a"], ["u"]),
                                helper.make_node("Squeeze", ["u", "b"], ["y"])], [c("a", [0, -1]), c("b", [0])]),
    "concat_negative": model([helper.make_node("Concat", ["x", "x"], ["y"], axis=-1)]),
    "range_constant_of_shape": model([
        helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i"], ["h"]),
        helper.make_node("Range", ["z", "h", "one"], ["r"]), helper.make_node("Shape", ["r"], ["rs"]),
        helper.make_node("ConstantOfShape", ["rs"], ["y"], value=helper.make_tensor("v", F, [1], [0.5]))],
        [c("i", 2), c("z", 0), c("one", 1)]),
    "range_step": model([
        helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i"], ["h"]),
        helper.make_node("Range", ["one", "h", "three"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=F)],
        [c("i", 3), c("one", 1), c("three", 3)]),
    "einsum": model([helper.make_node("Einsum", ["x", "x"], ["y"], equation="nchw,nchv->nhwv")]),
    "trilu_cumsum": model([helper.make_node("Trilu", ["x"], ["t"]), helper.make_node("CumSum", ["t", "a"], ["y"])],
                          [c("a", 2)]),
    "where_broadcast": model([helper.make_node("ReduceMean", ["x", "a"], ["m"], keepdims=1),
                              helper.make_node("Greater", ["x", "m"], ["g"]),
                              helper.make_node("Where", ["g", "x", "m"], ["y"])], [c("a", [1])]),
    "matmul_broadcast": model([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
                               helper.make_node("MatMul", ["x", "t"], ["y"])]),
    "pool_ceil_dilation": model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 3],
                                                  ceil_mode=1, dilations=[2, 1], pads=[1, 0, 0, 1])]),
    "avgpool_same": model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                            auto_pad="SAME_LOWER")]),
    "conv_transpose": model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 3], pads=[1, 0, 0, 1],
                                              output_padding=[1, 2], group=2)],
                            [c("w", np.zeros((6, 2, 3, 3)), np.float32)]),
    "reshape_zero_minus_one": model([helper.make_node("Reshape", ["x", "s"], ["y"])], [c("s", [0, -1, 2])]),
    "layernorm_stats": model([helper.make_node("LayerNormalization", ["x", "g"], ["y", "mu", "rs"], axis=2)],
                             [c("g", np.ones((1, 1)), np.float32)], outputs=("y", "mu", "rs")),
    "onehot": model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("OneHot", ["s", "d", "v"], ["y"])],
                    [c("d", 5), c("v", [0.0, 1.0], np.float32)]),
    "nonzero": model([helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Cast", ["nz"], ["y"], to=F)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_agrees_with_onnxruntime_at_three_sizes(name: str) -> None:
    m = CASES[name]
    shapes = infer_symbolic(m)
    verdict = check_shapes(m, shapes)
    assert verdict.ok, verdict.to_dict()
    assert len(verdict.sizes) == 3
    if name != "nonzero":  # NonZero's count is data: a fresh symbol no input binds
        assert all(size.unchecked == 0 for size in verdict.sizes), verdict.to_dict()
    else:
        assert all(size.unchecked >= 1 for size in verdict.sizes)
