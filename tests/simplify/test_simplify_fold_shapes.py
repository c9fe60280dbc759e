"""fold-shapes: Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains with dynamic and static dims."""

from __future__ import annotations

import numpy as np
import onnx

from gsrewrite.simplifier.interface import with_input_shapes
from gsrewrite.testing import model_from_text, op_counts

# x: [batch, seq, 8]; view it as [batch, seq, 2, 4] with the dims read at run time, like the exporters do.
SPLIT_HEADS = """
g (float[batch, seq, 8] x) => (float[batch, seq, 2, 4] y) {
    s = Shape (x)
    b = Gather <axis = 0> (s, zero)
    n = Gather <axis = 0> (s, one)
    h = Gather <axis = 0> (s, two)
    d = Div (h, heads)
    bu = Unsqueeze (b, axes)
    nu = Unsqueeze (n, axes)
    du = Unsqueeze (d, axes)
    target = Concat <axis = 0> (bu, nu, headsu, du)
    y = Reshape (x, target)
}"""
CONSTANTS = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "two": np.array(2, np.int64),
             "heads": np.array(2, np.int64), "axes": np.array([0], np.int64), "headsu": np.array([2], np.int64)}


def test_dynamic_reshape_target_becomes_a_constant(simplified):
    result = simplified(model_from_text(SPLIT_HEADS, initializers=CONSTANTS), "fold-shapes", "eliminate-dead-code")
    assert op_counts(result.model) == {"Reshape": 1}
    target = {t.name: onnx.numpy_helper.to_array(t) for t in result.model.graph.initializer}
    assert target[result.model.graph.node[0].input[1]].tolist() == [0, 0, 2, 4]
    dims = [d.dim_param or d.dim_value for d in result.model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq", 2, 4]  # dynamic dims stay dynamic, with their names


def test_data_dependent_target_is_kept(simplified):
    model = model_from_text("""
    g (float[batch, 8] x, int64[2] t) => (float[?, ?] y) {
        a = Add (t, one)
        y = Reshape (x, a)
    }""", initializers={"one": np.array([0], np.int64)})
    result = simplified(model, "fold-shapes", validate=False)
    assert op_counts(result.model) == {"Add": 1, "Reshape": 1}
    assert not result.counts


def test_target_is_rebuilt_from_a_graph_input(simplified):
    """A reshape target made of dims of another tensor is read with one Shape of the graph input."""
    model = model_from_text("""
    g (float[batch, seq, 8] x) => (float[batch, seq, 8] y) {
        flat = Reshape (x, minus_one_8)
        r = Relu (flat)
        s = Shape (x)
        b = Gather <axis = 0> (s, zero)
        n = Gather <axis = 0> (s, one)
        bu = Unsqueeze (b, axes)
        nu = Unsqueeze (n, axes)
        target = Concat <axis = 0> (bu, nu, eight)
        y = Reshape (r, target)
    }""", initializers=CONSTANTS | {"minus_one_8": np.array([-1, 8], np.int64), "eight": np.array([8], np.int64)})
    result = simplified(model, "fold-shapes", "eliminate-dead-code")
    assert op_counts(result.model) == {"Reshape": 2, "Relu": 1, "Shape": 1, "Concat": 1}
    assert [n.op_type for n in result.model.graph.node if n.op_type == "Shape"] == ["Shape"]


def test_input_shape_fixes_dims(simplified):
    model = model_from_text(SPLIT_HEADS, initializers=CONSTANTS)
    result = simplified(model, input_shapes={"x": (1, 5, 8)})
    assert op_counts(result.model) == {"Reshape": 1}
    dims = [d.dim_value for d in result.model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 5, 8]


def test_input_shape_binds_a_dim_name():
    fixed = with_input_shapes(model_from_text(SPLIT_HEADS, initializers=CONSTANTS), {"batch": 3})
    assert [d.dim_value or d.dim_param for d in fixed.graph.input[0].type.tensor_type.shape.dim] == [3, "seq", 8]


def test_expand_to_own_dims_becomes_a_noop(simplified):
    model = model_from_text("""
    g (float[batch, 1, 8] x) => (float[batch, 1, 8] y) {
        s = Shape (x)
        e = Expand (x, s)
        y = Relu (e)
    }""")
    result = simplified(model)
    assert op_counts(result.model) == {"Relu": 1}
