"""The values of shape arithmetic are symdim expressions (gsrewrite.simplifier.symbolic): sums and products of
dims fold where they cancel or are provably never negative, and only exact arithmetic becomes a constant."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from gsrewrite.graph.conversion import to_graph
from gsrewrite.shapes import symdim
from gsrewrite.simplifier.symbolic import propagate
from gsrewrite.testing import model_from_text, op_counts

INTS = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "two": np.array(2, np.int64),
        "five": np.array(5, np.int64), "axes": np.array([0], np.int64), "minus_one": np.array([-1], np.int64)}


def _values(text: str) -> dict[str, tuple]:
    """Tensor name -> the elements ``propagate`` gives it."""
    graph = to_graph(model_from_text(text, initializers=INTS))
    values = propagate(graph)
    return {t.name: values.get(t).elements for n in graph.nodes for t in n.outputs  # type: ignore[union-attr]
            if values.get(t) is not None}


def test_sum_of_dims_never_equals_minus_one(simplified):
    """Whisper's legacy decoder tests [batch, seq, past + seq] against -1 (Where(Equal(t, -1), 1, t)): a sum of
    dims is never negative, so the Equal folds (before, an arithmetic result was untracked and it stayed)."""
    model = model_from_text("""
    g (float[batch, seq] x, float[batch, past] p) => (float[batch, seq, total] y) {
        sx = Shape (x)
        sp = Shape (p)
        b = Gather <axis = 0> (sx, zero)
        n = Gather <axis = 0> (sx, one)
        m = Gather <axis = 0> (sp, one)
        t = Add (m, n)
        bu = Unsqueeze (b, axes)
        nu = Unsqueeze (n, axes)
        tu = Unsqueeze (t, axes)
        target = Concat <axis = 0> (bu, nu, tu)
        minus = Expand (minus_one, three)
        eq = Equal (target, minus)
        w = Where (eq, ones, target)
        x3 = Unsqueeze (x, two_axes)
        y = Expand (x3, w)
    }""", initializers=INTS | {"three": np.array([3], np.int64), "ones": np.array([1, 1, 1], np.int64),
                               "two_axes": np.array([2], np.int64)})
    result = simplified(model, "fold-constants", "fold-shapes", "eliminate-dead-code")
    assert "Equal" not in op_counts(result.model)


def test_arithmetic_that_cancels_is_the_dim(simplified):
    """(batch + seq) - seq is batch: the Reshape target [that, -1] becomes the constant [0, -1]."""
    model = model_from_text("""
    g (float[batch, seq, 8] x) => (float[batch, ?] y) {
        s = Shape (x)
        b = Gather <axis = 0> (s, zero)
        n = Gather <axis = 0> (s, one)
        sum = Add (b, n)
        back = Sub (sum, n)
        bu = Unsqueeze (back, axes)
        target = Concat <axis = 0> (bu, minus_one)
        y = Reshape (x, target)
    }""", initializers=INTS)
    result = simplified(model, "fold-shapes", "eliminate-dead-code")
    assert op_counts(result.model) == {"Reshape": 1}
    constants = {t.name: onnx.numpy_helper.to_array(t).tolist() for t in result.model.graph.initializer}
    assert constants[result.model.graph.node[0].input[1]] == [0, -1]


def test_division_is_tracked_only_where_truncation_is_floor():
    """ONNX's integer Div truncates; symdim's floor_div floors: they agree on a sum of dims over a positive int,
    so (b + b) / 2 is b, while (b - 5) / 2 (negative for b < 5) is not tracked."""
    values = _values("""
    g (float[batch, 8] x) => (int64 q, int64 r) {
        s = Shape (x)
        b = Gather <axis = 0> (s, zero)
        twice = Add (b, b)
        q = Div (twice, two)
        less = Sub (b, five)
        r = Div (less, two)
    }""")
    assert values["q"] == (symdim.sym("batch"),)
    assert values["less"] == (symdim.sub(symdim.sym("batch"), 5),)
    assert values["r"] == (None,)


def test_unnamed_dims_are_distinct_symbols():
    """A dim shape inference left unnamed equals only itself: two of them never cancel."""
    values = _values("""
    g (float[?, 8] x, float[?, 8] z) => (int64 d, int64 e) {
        sx = Shape (x)
        sz = Shape (z)
        a = Gather <axis = 0> (sx, zero)
        c = Gather <axis = 0> (sz, zero)
        d = Sub (a, c)
        a2 = Gather <axis = 0> (sx, zero)
        e = Sub (a, a2)
    }""")
    assert values["d"] != (0,) and values["d"][0] is not None
    assert values["e"] == (0,)


def test_products_past_the_degree_bound_are_untracked():
    """Repeated squaring: batch**16 is tracked, batch**32 exceeds symdim's degree bound and is untracked (no
    exception)."""
    lines = ["s = Shape (x)", "p0 = Gather <axis = 0> (s, zero)"]
    lines += [f"p{i + 1} = Mul (p{i}, p{i})" for i in range(5)]
    body = "\n        ".join(lines)
    values = _values(f"""
    g (float[batch, 8] x) => (int64 p5) {{
        {body}
    }}""")
    power: symdim.DimValue = 1
    for _ in range(16):
        power = symdim.mul(power, symdim.sym("batch"))
    assert values["p4"] == (power,)
    assert values["p5"] == (None,)


ROUNDS_MODEL = """
g (float[batch, seq, 8] x) => (float[batch, seq, 2, 4] y, float[batch, ?] z) {
    s = Shape (x)
    b = Gather <axis = 0> (s, zero)
    n = Gather <axis = 0> (s, one)
    bu = Unsqueeze (b, axes)
    nu = Unsqueeze (n, axes)
    target = Concat <axis = 0> (bu, nu, two_four)
    i = Identity (x)
    y = Reshape (i, target)
    sum = Add (b, n)
    back = Sub (sum, n)
    back_u = Unsqueeze (back, axes)
    flat = Concat <axis = 0> (back_u, minus_one)
    z = Reshape (x, flat)
}"""


def test_simplify_walks_each_graph_once(simplified):
    """The shape values of a simplify run come from one walk of the graph: fold-shapes asks for them in every round
    it runs, and each later ask brings the same values up to date. The graph import walks the model at most once
    more (only where ONNX's inference leaves a type or dim unknown: here, the Reshape whose target is computed);
    validation, left out here, walks the models it plans inputs for on its own."""
    from gsrewrite.shapes import graph_values, walk

    model = model_from_text(ROUNDS_MODEL, initializers=INTS | {"two_four": np.array([2, 4], np.int64)})
    before, model_walks = dataclasses.replace(graph_values.COUNTS), walk.COUNTS.walks
    result = simplified(model, validate=False)
    walks, asks = graph_values.COUNTS.walks - before.walks, graph_values.COUNTS.refreshes - before.refreshes
    assert result.counts.get("fold-shapes") and result.rounds >= 2
    assert walks == 1 and asks >= 2, (walks, asks)
    assert walk.COUNTS.walks - model_walks <= 1


def test_values_kept_current_equal_a_fresh_walk():
    """Asked again, the values evaluate only the nodes that changed (none: no evaluation); after the graph changes
    (an input rewired to a constant, an attribute changed, a dim renamed) they are a fresh walk's."""
    import onnx_graphsurgeon as gs

    from gsrewrite.shapes.graph_values import COUNTS, GraphValues, graph_values

    graph = to_graph(model_from_text(ROUNDS_MODEL, initializers=INTS | {"two_four": np.array([2, 4], np.int64)}))
    kept = graph_values(graph)
    nodes = {n.outputs[0].name: n for n in graph.nodes}
    assert kept.get(nodes["back"].outputs[0]).value == symdim.sym("batch")  # type: ignore[union-attr]
    before = dataclasses.replace(COUNTS)
    assert graph_values(graph) is kept
    assert (COUNTS.walks, COUNTS.evaluations) == (before.walks, before.evaluations)

    nodes["n"].inputs[1] = gs.Constant("zero_again", np.array(0, np.int64))  # n now reads batch, not seq
    nodes["sum"].inputs[1] = nodes["b"].outputs[0]  # sum = 2 * batch
    nodes["s"].inputs[0].shape = [3, "seq", 8]

    def values(found):
        return {t.name: getattr(found.get(t), "value", None) for n in graph.nodes for t in n.outputs}

    current = values(graph_values(graph))
    assert current == values(GraphValues(graph))
    assert current["n"] == 3 and current["back"] == 3 and current["target"] == [3, 3, 2, 4]
    assert current["flat"] == [3, -1]
    nodes["b"].attrs["axis"] = 1  # out of range (an attribute alone changed): b is not known
    current = values(graph_values(graph))
    assert current == values(GraphValues(graph))
    assert current["b"] is None and current["target"] is None
