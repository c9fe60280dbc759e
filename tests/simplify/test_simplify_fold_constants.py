"""fold-constants: constant subgraphs become constants; blow-ups (Tile, ConstantOfShape, Expand) never do."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import model_from_text, op_counts

RNG = np.random.default_rng(0)


def test_constant_chain_folds(simplified):
    model = model_from_text("""
    g (float[2, 4] x) => (float[2, 4] y) {
        c = Add (a, b)
        d = Sqrt (c)
        y = Mul (x, d)
    }""", initializers={"a": RNG.uniform(1, 2, (4,)).astype(np.float32), "b": np.ones(4, np.float32)})
    result = simplified(model, "fold-constants")
    assert op_counts(result.model) == {"Mul": 1}
    assert result.counts == {"fold-constants": 2}


def test_constant_nodes_and_static_shapes_fold(simplified):
    model = model_from_text("""
    g (float[2, 3, 4] x) => (float[6, 4] y) {
        s = Shape (x)
        two = Constant <value = int64[1] {2}> ()
        last = Slice (s, two, big)
        lead = Constant <value = int64[1] {6}> ()
        target = Concat <axis = 0> (lead, last)
        y = Reshape (x, target)
    }""", initializers={"big": np.array([9], np.int64)})
    result = simplified(model, "fold-constants")
    assert op_counts(result.model) == {"Reshape": 1}
    assert result.counts["constant-nodes"] == 2


def test_reference_fallback_evaluates_other_ops(simplified):
    model = model_from_text("""
    g (float[3] x) => (float[3] y) {
        s = Sin (a)
        y = Add (x, s)
    }""", initializers={"a": np.array([0.1, 0.2, 0.3], np.float32)})
    result = simplified(model, "fold-constants")
    assert op_counts(result.model) == {"Add": 1}


def test_tile_blow_up_stays_a_node(simplified):
    """Regression: folding Tile/ConstantOfShape/Expand of a few bytes into a large tensor bloats the model."""
    model = model_from_text("""
    g (float[4096, 16] x) => (float[4096, 16] y) {
        big = Tile (row, reps)
        zeros = ConstantOfShape <value = float[1] {0.0}> (shape)
        wide = Expand (one, shape)
        a = Add (x, big)
        b = Add (a, zeros)
        y = Mul (b, wide)
    }""", initializers={"row": RNG.normal(size=(1, 16)).astype(np.float32), "reps": np.array([4096, 1], np.int64),
                        "shape": np.array([4096, 16], np.int64), "one": np.array(1.0, np.float32)})
    result = simplified(model, "fold-constants")
    assert op_counts(result.model)["Tile"] == 1
    assert op_counts(result.model)["ConstantOfShape"] == 1
    assert op_counts(result.model)["Expand"] == 1
    assert result.after.size <= result.before.size


def test_shared_weight_is_not_duplicated(simplified):
    """Transpose(W) of a weight that another node also reads would store W twice: it stays a node."""
    weight = RNG.normal(size=(64, 64)).astype(np.float32)
    text = """
    g (float[2, 64] x) => (float[2, 64] y) {
        wt = Transpose <perm = [1, 0]> (w)
        a = MatMul (x, wt)
        y = MatMul (a, w)
    }"""
    result = simplified(model_from_text(text, initializers={"w": weight}), "fold-constants")
    assert op_counts(result.model)["Transpose"] == 1
    exclusive = text.replace("y = MatMul (a, w)", "y = Relu (a)")
    result = simplified(model_from_text(exclusive, initializers={"w": weight}), "fold-constants")
    assert "Transpose" not in op_counts(result.model)
    assert result.after.size <= result.before.size


def test_max_fold_bytes_caps_folding(simplified):
    model = model_from_text("""
    g (float[2, 4] x) => (float[2, 4] y) {
        c = Neg (a)
        y = Mul (x, c)
    }""", initializers={"a": np.ones(4, np.float32)})
    assert op_counts(simplified(model, "fold-constants", max_fold_bytes=8).model) == {"Neg": 1, "Mul": 1}
    assert op_counts(simplified(model, "fold-constants", max_fold_bytes=16).model) == {"Mul": 1}


def test_fold_pass_lists_the_nodes_it_left_alone():
    """The pass records why each blow-up was not folded; ``skipped_folds`` gathers them for the report."""
    from gsrewrite.graph.conversion import import_graph
    from gsrewrite.simplifier.passes.base import SimplifyOptions
    from gsrewrite.simplifier.passes.fold_constants import FoldConstants, skipped_folds

    model = model_from_text("""
    g (float[4096, 16] x) => (float[4096, 16] y) {
        big = Tile (row, reps)
        huge = ConstantOfShape <value = float[1] {0.0}> (shape)
        s = ReduceMax <keepdims = 0> (huge)
        a = Add (x, big)
        y = Add (a, s)
    }""", initializers={"row": np.ones((1, 16), np.float32), "reps": np.array([4096, 1], np.int64),
                        "shape": np.array([2**40], np.int64)})
    graph, _ = import_graph(model)
    fold = FoldConstants().configure(SimplifyOptions(max_fold_bytes=1 << 20))
    fold.run(graph)
    skipped = skipped_folds([fold])
    assert "would grow the model" in skipped["Tile -> big"]
    assert "4,398,046,511,104 bytes (over --max-fold-bytes 1,048,576)" in skipped["ConstantOfShape -> huge"]
    assert {"Tile", "ConstantOfShape"} <= {n.op for n in graph.nodes}
