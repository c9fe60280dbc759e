"""The numpy kernels of constant folding agree with onnx.reference, edge cases included."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import pytest

from gsrewrite.graph.evaluate import KERNELS, _reference, evaluate

I64 = np.int64
CASES = [
    ("Slice", {}, [np.arange(10), np.array([8], I64), np.array([-100], I64), np.array([0], I64), np.array([-3], I64)]),
    ("Slice", {}, [np.arange(12).reshape(3, 4), np.array([-1, 1], I64), np.array([2**63 - 1, -1], I64)]),
    ("Div", {}, [np.array([7, -7, 7, -7], I64), np.array([2, 2, -2, -2], I64)]),
    ("Div", {}, [np.array([1.5, -3.0], np.float32), np.array([2.0, 0.5], np.float32)]),
    ("Gather", {"axis": 0}, [np.array([10, 20, 30], I64), np.array([-1, 0], I64)]),
    ("Gather", {"axis": 1}, [np.arange(6).reshape(2, 3), np.array(2, I64)]),
    ("Range", {}, [np.array(1, I64), np.array(10, I64), np.array(3, I64)]),
    ("Range", {}, [np.array(5.0, np.float32), np.array(1.0, np.float32), np.array(-1.5, np.float32)]),
    ("Squeeze", {}, [np.zeros((1, 3, 1)), None]),
    ("Unsqueeze", {}, [np.zeros((2, 3)), np.array([-1, 0], I64)]),
    ("Flatten", {"axis": -1}, [np.zeros((2, 3, 4))]),
    ("Cast", {"to": 6}, [np.array([-1.7, 2.9], np.float32)]),
    ("Where", {}, [np.array([True, False]), np.array([1, 2], I64), np.array([3, 4], I64)]),
    ("Reshape", {}, [np.zeros((2, 3, 4)), np.array([0, -1], I64)]),
    ("Expand", {}, [np.array([[1], [2]], I64), np.array([3, 1, 4], I64)]),
    ("Concat", {"axis": -1}, [np.ones((2, 1)), np.zeros((2, 2))]),
    ("Transpose", {}, [np.arange(6).reshape(1, 2, 3)]),
    ("Equal", {}, [np.array([1, 2], I64), np.array([1, 3], I64)]),
    ("Max", {}, [np.array([1, 5], I64), np.array([4, 2], I64), np.array([3, 3], I64)]),
]


@pytest.mark.parametrize(("op", "attrs", "values"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_kernel_matches_reference(op, attrs, values):
    values = [None if v is None else np.asarray(v) for v in values]
    node = gs.Node(op, attrs=attrs, inputs=[gs.Variable(f"i{k}") for k in range(len(values))],
                   outputs=[gs.Variable("out")])
    assert op in KERNELS
    ours, reference = evaluate(node, values, 18), _reference(node, values, 18)
    assert ours is not None and reference is not None
    assert ours[0].dtype == reference[0].dtype
    np.testing.assert_array_equal(ours[0], reference[0])


def test_unknown_case_falls_back_or_gives_up():
    node = gs.Node("Gather", attrs={"axis": 0}, inputs=[gs.Variable("d"), gs.Variable("i")],
                   outputs=[gs.Variable("o")])
    assert evaluate(node, [np.arange(3), np.array([7], I64)], 18) is None  # out of range: no value at all


@pytest.mark.parametrize(("op", "attrs", "values"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_cost_bounds_the_evaluated_size(op, attrs, values):
    """The size predicted before evaluating is never below the real one (exact but for Slice's upper bound)."""
    from gsrewrite.graph.fold_cost import Shaped, cost

    values = [None if v is None else np.asarray(v) for v in values]
    node = gs.Node(op, attrs=attrs, inputs=[gs.Variable(f"i{k}") for k in range(len(values))],
                   outputs=[gs.Variable("out")])
    real = evaluate(node, values, 18)[0].nbytes
    predicted = cost(node, values, 18)
    assert predicted.nbytes == real or (op == "Slice" and predicted.nbytes >= real)
    assert predicted.work >= real // max(evaluate(node, values, 18)[0].itemsize, 1)
    if op in ("Transpose", "Neg", "Concat"):  # a large operand is described by its shape alone: same answer
        shaped = [Shaped(v.shape, v.itemsize, 1) for v in values]
        assert cost(node, shaped, 18).nbytes == real


def test_cost_of_reference_ops_comes_from_shape_inference():
    from gsrewrite.graph.fold_cost import Shaped, cost

    node = gs.Node("Split", attrs={"num_outputs": 2}, inputs=[gs.Variable("x")],
                   outputs=[gs.Variable("a"), gs.Variable("b")])
    assert cost(node, [Shaped((2**20, 4), 4, 1)], 18).nbytes == 2**20 * 16  # nothing allocated to know it
    node = gs.Node("Einsum", attrs={"equation": "ij,jk->ik"}, inputs=[gs.Variable("a"), gs.Variable("b")],
                   outputs=[gs.Variable("c")])
    estimate = cost(node, [Shaped((100, 200), 4, 1), Shaped((200, 300), 4, 1)], 18)
    assert estimate.nbytes == 100 * 300 * 4 and estimate.work == 100 * 200 * 300
