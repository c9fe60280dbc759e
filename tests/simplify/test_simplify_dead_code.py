"""eliminate-dead-code: nodes no output needs are removed; graph inputs and subgraph reads are kept."""

from __future__ import annotations

from gsrewrite.testing import model_from_text, op_counts


def test_unused_branch_is_removed(simplified):
    model = model_from_text("""
    g (float[2, 3] x, float[2, 3] unused) => (float[2, 3] y) {
        dead = Sigmoid (x)
        dead2 = Neg (dead)
        y = Relu (x)
    }""")
    result = simplified(model, "eliminate-dead-code")
    assert op_counts(result.model) == {"Relu": 1}
    assert [i.name for i in result.model.graph.input] == ["x", "unused"]


def test_tensor_read_only_by_a_branch_is_kept(simplified):
    model = model_from_text("""
    g (float[2] x, bool[1] c) => (float[2] y) {
        a = Relu (x)
        unused = Sigmoid (x)
        y = If (c) <then_branch = then_b () => (float[2] t) { t = Neg (a) },
                    else_branch = else_b () => (float[2] e) { e = Identity (a) }>
    }""")
    result = simplified(model, "eliminate-dead-code", validation_options={"runs": 4})
    assert op_counts(result.model) == {"Relu": 1, "If": 1}
