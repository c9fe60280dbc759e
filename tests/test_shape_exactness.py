"""The shape engine says which of its values hold for every size (``Info.exact``): a rule that assumes (a small
Slice bound inside a symbolic dim, ONNX's truncating Div taken as a floor, a symbolic count taken as >= 0) marks
its output, and what is computed from it, not exact; under ``values.proving()`` those elements are unknown
instead. The shapes and values themselves are what they were (the analysis commands' numbers do not move)."""

from __future__ import annotations

import numpy as np

from gsrewrite.shapes import symdim
from gsrewrite.shapes.walk import infer_symbolic
from gsrewrite.testing import model_from_text

INTS = {"zero": np.array(0, np.int64), "one": np.array([1], np.int64), "minus_one": np.array([-1], np.int64),
        "axes": np.array([0], np.int64), "two": np.array(2, np.int64), "five": np.array(5, np.int64),
        "ones": np.array([1, 1], np.int64)}

MODEL = """
g (float[batch, 8] x) => (int64 exact_q, int64 floor_q, int64 later, float[rows, 8] inner, int64[2] inner_shape,
                         int64[2] both) {
    s = Shape (x)
    b = Gather <axis = 0> (s, zero)
    twice = Add (b, b)
    exact_q = Div (twice, two)
    less = Sub (b, five)
    floor_q = Div (less, two)
    later = Add (floor_q, two)
    inner = Slice (x, one, minus_one, axes)
    inner_shape = Shape (inner)
    bu = Unsqueeze (b, axes)
    lu = Unsqueeze (later, axes)
    both = Concat <axis = 0> (bu, lu)
}"""


def _walked():
    shapes = infer_symbolic(model_from_text(MODEL, initializers=INTS))
    return shapes.tensors


def test_exact_and_assumed_values_are_told_apart():
    tensors = _walked()
    batch = symdim.sym("batch")
    # (b + b) / 2: truncation is the floor for a sum of dims: proven for every size
    assert tensors["exact_q"].value == batch and tensors["exact_q"].exact
    # (b - 5) / 2: ONNX truncates toward zero, the engine floors: the same only for batch >= 5
    assert tensors["floor_q"].value == symdim.floor_div(symdim.sub(batch, 5), 2)
    assert not tensors["floor_q"].exact
    # what is computed from an assumption is not proven either, even through exact rules
    assert not tensors["later"].exact and not tensors["both"].exact
    assert tensors["b"].exact and tensors["s"].exact and tensors["bu"].exact


def test_a_small_slice_bound_inside_a_symbolic_dim_is_an_assumption():
    tensors = _walked()
    batch = symdim.sym("batch")
    # x[1:-1] on batch rows is batch - 2 only for batch >= 2 (ONNX clamps: 0 rows for batch = 1)
    assert tensors["inner"].shape == [symdim.sub(batch, 2), 8]
    assert not tensors["inner"].exact
    assert tensors["inner_shape"].value == [symdim.sub(batch, 2), 8] and not tensors["inner_shape"].exact


def test_proving_gives_unknown_elements_instead_of_assumptions():
    from onnx_graphsurgeon import import_onnx

    from gsrewrite.shapes.graph_values import GraphValues

    graph = import_onnx(model_from_text(MODEL, initializers=INTS))
    values = GraphValues(graph)
    by_name = {t.name: values.get(t) for n in graph.nodes for t in n.outputs}
    batch = symdim.sym("batch")
    assert by_name["exact_q"].value == batch  # type: ignore[union-attr]
    assert by_name["floor_q"].value is None and by_name["later"].value is None  # type: ignore[union-attr]
    assert by_name["both"].value == [batch, None]  # type: ignore[union-attr]  # the exact element stays


def test_onnx_static_dims_win_when_asked():
    """``infer_shapes`` hands the walk ONNX's inference (``onnx_dims``): a dim ONNX knows statically replaces the
    rules' expression from the first walk on, and what is computed from it follows (wav2vec2's dynamo export: 4
    value_infos of a simpler, equal expression); without it, the rules' own expression stays."""
    import onnx

    text = """
    g (float[batch, seq] x) => (int64[2] s) {
        inner = Slice (x, one, minus_one, one)
        s = Shape (inner)
    }"""
    model = model_from_text(text, initializers=INTS)
    model.graph.value_info.append(onnx.helper.make_tensor_value_info("inner", onnx.TensorProto.FLOAT, ["batch", 6]))
    seq, batch = symdim.sym("seq"), symdim.sym("batch")
    assert infer_symbolic(model).tensors["s"].value == [batch, symdim.sub(seq, 2)]
    assert infer_symbolic(model, onnx_dims=True).tensors["s"].value == [batch, 6]


def test_graph_values_read_a_constant_of_shape_fill():
    """ConstantOfShape's ``value`` is a tensor attribute (an onnx-graphsurgeon constant): its fill is read, not the
    default 0 (legacy exports build ``-1`` vectors this way to compare a shape with)."""
    from onnx_graphsurgeon import import_onnx

    from gsrewrite.shapes.graph_values import GraphValues

    model = model_from_text("""
    g (float[batch, 8] x) => (int64[2] minus) {
        s = Shape (x)
        n = Shape (s)
        filled = ConstantOfShape <value = int64[1] {7}> (n)
        minus = Mul (filled, minus_one)
    }""", initializers=INTS)
    graph = import_onnx(model)
    values = GraphValues(graph)
    assert {t.name: values.get(t).value for n in graph.nodes for t in n.outputs} == {  # type: ignore[union-attr]
        "s": [symdim.sym("batch"), 8], "n": [2], "filled": [7, 7], "minus": [-7, -7]}
