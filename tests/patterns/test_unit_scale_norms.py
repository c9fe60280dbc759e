"""Norms whose scale is all ones (and bias all zeros): simplify removes those no-ops before the fusions run, and
the norm must still fuse (a LLaMA export with default norm weights left 21 of 21 RMSNorms unfused)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx.parser
import pytest
from onnx import numpy_helper

from gsrewrite.pipelines import optimize

_TEXT = """<ir_version: 10, opset_import: ["" : 17]>
norms (float[batch, seq, 16] x) => (float[batch, seq, 16] y, float[batch, seq, 16] z) {
   two = Constant <value = float {2.0}> ()
   eps = Constant <value = float {1e-6}> ()
   sq = Pow (x, two)
   ms = ReduceMean <axes = [-1], keepdims = 1> (sq)
   v = Add (ms, eps)
   r = Sqrt (v)
   i = Reciprocal (r)
   n = Mul (x, i)
   y = Mul (n, w)
   mean = ReduceMean <axes = [-1], keepdims = 1> (x)
   d = Sub (x, mean)
   sq2 = Pow (d, two)
   var = ReduceMean <axes = [-1], keepdims = 1> (sq2)
   ve = Add (var, eps)
   std = Sqrt (ve)
   nn = Div (d, std)
   sn = Mul (nn, w)
   z = Add (sn, b)
}"""


@pytest.mark.parametrize("weight", [1.0, 1.5])
def test_rmsnorm_and_layernorm_fuse_whatever_their_scale(weight: float) -> None:
    model = onnx.parser.parse_model(_TEXT)
    model.graph.initializer.extend([numpy_helper.from_array(np.full(16, weight, np.float32), "w"),
                                    numpy_helper.from_array(np.zeros(16, np.float32), "b")])
    result = optimize(model)
    ops = Counter(n.op_type for n in result.model.graph.node)
    assert ops == {"SimplifiedLayerNormalization": 1, "LayerNormalization": 1}, dict(ops)
    assert result.validation.ok
    scales = {n.op_type: numpy_helper.to_array(next(t for t in result.model.graph.initializer if t.name == n.input[1]))
              for n in result.model.graph.node}
    assert all(np.array_equal(s, np.full(16, weight, np.float32)) for s in scales.values())
