"""Symbolic dims and shape inference: expressions, the per-op rules, and agreement with onnxruntime at three
input sizes on models built here (a CNN with dynamic spatial dims, exporter-style shape arithmetic)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.errors import UsageError
from gsrewrite.pipelines.shape_check import check_shapes
from gsrewrite.shapes import symdim
from gsrewrite.shapes.symdim import ceil_div, dim_max, evaluate, parse, sym
from gsrewrite.shapes.walk import annotate, infer_symbolic, parse_input_shapes, shape_text

F = TensorProto.FLOAT
b, s, h = sym("batch"), sym("seq"), sym("h")


@pytest.mark.parametrize("expr", [(h - 3) // 2 + 1, ((h - 3) // 2 + 1) * b, (s + 3) % 2, -((h - 3) // 2),
                                  ceil_div(s, 4) * 3, dim_max(s, h) * 2, s - (h - 3) // 2, b * s * 12 + 7])
def test_expressions_print_parse_back_and_evaluate_like_python(expr) -> None:
    assert parse(str(expr)) == expr
    for value in range(1, 30):
        env = {"h": value, "batch": 3, "seq": value + 2}
        assert evaluate(expr, env) == eval(str(expr), {"max": max, "min": min}, env)


def test_canonical_forms() -> None:
    assert s * 2 == 2 * s and (b + s) - s == b and (b * s) // s == b
    assert (2 * h + 1) // 2 == h and str((h - 3) // 2 + 1) == "(h - 3)//2 + 1"
    assert isinstance((s * 12) // 12, symdim.Expr) and (s * 12) // 12 == s
    assert dim_max(s, 1) != s and dim_max(s + 1, s) == s + 1  # max(1, s) is not s when s may be 0


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _cnn() -> onnx.ModelProto:
    """Conv (pads, strides, dilations, groups), ceil-mode pooling, Resize, Pad, Slice, Split and a Reshape whose
    target is computed from Shape: every dim follows the dynamic H and W."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 2, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 1, 2], np.int64), "pads"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "axis2"),
             numpy_helper.from_array(np.array([4, 4], np.int64), "split")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 2, 1, 0], strides=[2, 1], dilations=[1, 2]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], group=4, auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("Resize", ["p", "", "scales"], ["r"], mode="nearest"),
        helper.make_node("Pad", ["r", "pads"], ["pd"]),
        helper.make_node("Slice", ["pd", "one", "minus1", "axis2"], ["sl"]),
        helper.make_node("Split", ["sl", "split"], ["s1", "s2"], axis=1),
        helper.make_node("Shape", ["s1"], ["shp"]),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["s2", "target"], ["flat"]),
        helper.make_node("ConvTranspose", ["s1", "w1t"], ["up"], strides=[2, 2], output_padding=[1, 0]),
    ]
    inits.append(numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w1t"))
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3, "H", "W"])],
                  [helper.make_tensor_value_info("flat", F, None), helper.make_tensor_value_info("up", F, None)],
                  inits)


def test_cnn_dims_are_expressions_that_onnxruntime_agrees_with_at_three_sizes() -> None:
    model = _cnn()
    shapes = infer_symbolic(model)
    assert shape_text(shapes.shape("c1")) == ["N", 8, "(H - 1)//2 + 1", "W - 2"]
    assert not shapes.unknown
    verdict = check_shapes(model, shapes)
    assert verdict.ok and len(verdict.sizes) == 3
    assert all(size.matched == sum(len(n.output) for n in model.graph.node) for size in verdict.sizes)
    assert all(size.unchecked == 0 for size in verdict.sizes)


def test_given_input_shapes_and_bindings() -> None:
    model = _cnn()
    fixed = infer_symbolic(model, parse_input_shapes(["x:1,3,32,seq*2"]))
    assert fixed.shape("c1") == [1, 8, 16, 2 * sym("seq") - 2]
    bound = infer_symbolic(model, parse_input_shapes(["H=32", "W=20", "N=2"]))
    assert bound.shape("c1") == [2, 8, 16, 18] and bound.shape("flat") is not None
    with pytest.raises(UsageError, match="not an input"):
        infer_symbolic(model, parse_input_shapes(["nope:1,2"]))
    with pytest.raises(UsageError, match="SYMBOL=INT"):
        parse_input_shapes(["junk"])


def test_exporter_shape_arithmetic_keeps_reshape_targets_symbolic() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as the TorchScript exporter writes attention heads."""
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array(1, np.int64), "i1"),
             numpy_helper.from_array(np.array([4, 8], np.int64), "heads"),
             numpy_helper.from_array(np.array([0], np.int64), "ax")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "i0"], ["b"]), helper.make_node("Gather", ["shape", "i1"], ["s"]),
             helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]), helper.make_node("Unsqueeze", ["s", "ax"], ["s1"]),
             helper.make_node("Concat", ["b1", "s1", "heads"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"]),
             helper.make_node("Transpose", ["y"], ["t"], perm=[0, 2, 1, 3])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", "seq", 32])],
                   [helper.make_tensor_value_info("t", F, None)], inits)
    shapes = infer_symbolic(model)
    assert shapes.shape("t") == [b, 4, s, 8]
    assert check_shapes(model, shapes).ok
    annotated = annotate(model, shapes)
    dims = annotated.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 4, "seq", 8]


def test_the_one_entry_point_completes_what_onnx_leaves_unknown() -> None:
    """ONNX types Range/TopK outputs with unknown dims; shapes.inference.infer_shapes (graph import, extract,
    validation's memory estimate) fills them from the symbolic walk."""
    from gsrewrite.shapes.handlers import onnx_and_handlers
    from gsrewrite.shapes.inference import infer_shapes

    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("i1", 1), ("z", 0), ("one", 1), ("ax", [0]), ("k", [3]))]
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i1"], ["n"]),
             helper.make_node("Range", ["z", "n", "one"], ["r"]), helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Unsqueeze", ["rf", "ax"], ["u"]), helper.make_node("Mul", ["x", "u"], ["y"]),
             helper.make_node("TopK", ["x", "k"], ["v", "idx"], axis=1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, ["N", "M"])],
                   [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("v", F, None)], inits)

    def dims(m: onnx.ModelProto) -> dict[str, list]:
        return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
                for v in [*m.graph.value_info, *m.graph.output]}

    assert dims(onnx_and_handlers(model))["r"][0].startswith("unk__")
    completed = dims(infer_shapes(model))
    assert completed["r"] == ["M"] and completed["y"] == ["N", "M"] and completed["v"] == ["N", 3]


def test_hostile_shape_arithmetic_stays_bounded() -> None:
    """(a + b) squared thirty times would have 2**30 terms: the walk gives up on that value (unknown), quickly."""
    import time

    nodes = [helper.make_node("Shape", ["x"], ["s0"]), helper.make_node("ReduceSum", ["s0"], ["v0"], keepdims=1)]
    for i in range(30):
        nodes.append(helper.make_node("Mul", [f"v{i}", f"v{i}"], [f"v{i + 1}"]))
    nodes.append(helper.make_node("ConstantOfShape", ["v30"], ["y"]))
    model = _model(nodes, [helper.make_tensor_value_info("x", F, ["a", "b"])],
                   [helper.make_tensor_value_info("y", F, None)], opset=13)
    start = time.process_time()  # CPU, not wall time: the same on a loaded machine
    shapes = infer_symbolic(model)
    assert time.process_time() - start < 5
    # the value past the bound is dropped: y's dim is ONNX's fresh symbol, not a 2**30-term polynomial
    assert shapes.fallback_ops == {"ConstantOfShape": 1}
    (dim,) = shapes.shape("y") or [None]
    assert isinstance(dim, symdim.Expr) and len(dim.terms) == 1
    import gsrewrite

    assert gsrewrite.profile(model).unprofiled == {}


def test_nested_loop_bodies_are_walked_within_a_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loops nested 7 deep, the innermost body 20,000 nodes: each Loop walks its body twice when a carried dim
    changes, 2**7 x 20,000 visits without a bound; the walk stops at its budget (ONNX's inference types the rest)
    and takes seconds, not minutes."""
    import time

    from onnx import TensorProto as T

    from gsrewrite.shapes.walk import MAX_BODY_WORK, _Walk

    def body(inner: list[onnx.NodeProto]) -> onnx.GraphProto:
        return helper.make_graph(
            [*inner, helper.make_node("Concat", ["v_in", "v_in"], ["v_out"], axis=0),
             helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
            [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("c_in", T.BOOL, []),
             helper.make_tensor_value_info("v_in", T.FLOAT, None)],
            [helper.make_tensor_value_info("c_out", T.BOOL, []), helper.make_tensor_value_info("v_out", T.FLOAT, None)])

    nodes = [helper.make_node("Identity", ["v_in" if i == 0 else f"n{i - 1}"], [f"n{i}"]) for i in range(20_000)]
    graph = body(nodes)
    for _ in range(6):
        graph = body([helper.make_node("Loop", ["m", "c_in", "v_in"], ["deeper"], body=graph)])
    loop = helper.make_node("Loop", ["m", "c", "x"], ["y"], body=graph)
    model = _model([loop], [helper.make_tensor_value_info("x", T.FLOAT, ["n"])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)],
                   [numpy_helper.from_array(np.array(2, np.int64), "m"), numpy_helper.from_array(np.array(True), "c")])
    visits = 0
    visit = _Walk._visit

    def counted(walk: _Walk, node: onnx.NodeProto) -> None:
        nonlocal visits
        visits += 1
        visit(walk, node)

    monkeypatch.setattr(_Walk, "_visit", counted)
    start = time.process_time()
    shapes = infer_symbolic(model)
    # a count, not a wall time: the walk's budget, and the one Loop of the model (2**7 x 20,000 without a bound)
    assert visits <= MAX_BODY_WORK + len(model.graph.node), visits
    assert time.process_time() - start < 30  # CPU: about 2.5 s; exponential in the depth without the budget
    assert shapes.shape("y") is not None and len(shapes.shape("y") or []) == 1
