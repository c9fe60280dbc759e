"""Shape reads of fused intermediates move to tensors that survive (the fused nodes do not stay alive)."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import assert_rewrite, model_from_text

LAYERNORM = """
agraph (float[batch, seq, 8] x) => (float[batch, seq, 8] y, float[batch, seq, 8] z) {
  m = ReduceMean <axes = [-1]> (x)
  d = Sub (x, m)
  sq = Mul (d, d)
  v = ReduceMean <axes = [-1]> (sq)
  ve = Add (v, eps)
  s = Sqrt (ve)
  n = Div (d, s)
  g = Mul (n, gamma)
  y = Add (g, beta)
  %s
}
"""
WEIGHTS = {"eps": np.array(1e-5, np.float32), "gamma": np.linspace(0.5, 1.5, 8, dtype=np.float32),
           "beta": np.linspace(-1, 1, 8, dtype=np.float32)}


def test_shape_of_an_intermediate_is_read_from_a_survivor() -> None:
    # z = reshape(y, shape(d)): d (the centred x) has x's and y's dims, so the Sub need not stay
    model = model_from_text(LAYERNORM % "sh = Shape (d)\n  z = Reshape (y, sh)", initializers=WEIGHTS)
    result = assert_rewrite(model, ["layernorm"], {"layernorm": 1}, produces={"LayerNormalization": 1},
                            absent=["Sub", "ReduceMean", "Sqrt", "Div"])
    shape = next(n for n in result.model.graph.node if n.op_type == "Shape")
    assert shape.input[0] in ("x", "y")


def test_partial_reads_plan_runs_from_survivors_and_constants_for_static_dims() -> None:
    import onnx_graphsurgeon as gs

    from gsrewrite.engine.shape_reads import _plan

    merged = gs.Variable("merged", np.float32, ["batch", "seq", 128])  # attention output [B, S, H*dh]
    other = gs.Variable("other", np.float32, ["seq", "batch"])
    parts = _plan(["batch", "seq", 4, 32], [other, merged], opset=14)  # the context [B, S, H, dh]
    assert parts == [(merged, 0, 2), [4, 32]]
    assert _plan(["batch", "unknown"], [merged], opset=17) is None  # a dim no survivor has
    assert _plan([4, 32], [merged], opset=17) is None  # nothing named: not trusted
