"""Property tests of the matcher on random DAGs (hypothesis).

A template (Log(Add(Exp(a), 1)) -> Softplus, with the Add's operands in either order) is planted k times in
a random graph of other ops; some plants get an extra consumer of their inner Exp, which must block them.
The matcher must find exactly the clean plants, and the rewritten graph must compute the same outputs.
"""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from gsrewrite.patterns import PatternRegistry
from gsrewrite.pipelines import apply
from gsrewrite.testing import assert_numerically_equal

SOFTPLUS = '''
family = "softplus"
[[pattern]]
name = "softplus"
match = """
softplus (a) => (y) <float one = {1.0}> {
  e = Exp (a)
  p = Add (e, one)
  y = Log (p)
}
"""
replace = "softplus (a) => (y) { y = Softplus (a) }"
'''
UNARY = ["Relu", "Neg", "Abs", "Sigmoid", "Tanh"]
BINARY = ["Add", "Mul", "Sub"]


def _registry(tmp_path_factory) -> PatternRegistry:
    path = tmp_path_factory.mktemp("pat") / "softplus.toml"
    path.write_text(SOFTPLUS)
    registry = PatternRegistry()
    registry.add_file(path)
    return registry


def _plant(nodes, inits, pick, index, leaky, swapped):
    a = f"plant{index}_in"  # bounded input: exp() of a large value would overflow only in the original
    nodes.append(helper.make_node("Tanh", [pick()], [a]))
    e, p, y = f"plant{index}_e", f"plant{index}_p", f"plant{index}_y"
    one = f"one{index}"
    inits.append(helper.make_tensor(one, TensorProto.FLOAT, [], [1.0]))
    nodes.append(helper.make_node("Exp", [a], [e]))
    nodes.append(helper.make_node("Add", [one, e] if swapped else [e, one], [p]))
    nodes.append(helper.make_node("Log", [p], [y]))
    if leaky:  # an outside consumer of the inner Exp: this plant must not be rewritten
        nodes.append(helper.make_node("Relu", [e], [f"plant{index}_leak"]))
        return [y, f"plant{index}_leak"]
    return [y]


@st.composite
def random_dag(draw):
    nodes, inits, available = [], [], ["x"]
    clean = 0
    steps = draw(st.lists(st.sampled_from(["unary", "binary", "plant", "leaky"]), min_size=3, max_size=30))
    for i, step in enumerate(steps):
        def pick(available=available):
            return available[draw(st.integers(0, len(available) - 1))]
        if step in ("plant", "leaky"):
            available += _plant(nodes, inits, pick, i, step == "leaky", draw(st.booleans()))
            clean += step == "plant"
        elif step == "unary":
            nodes.append(helper.make_node(draw(st.sampled_from(UNARY)), [pick()], [f"t{i}"]))
            available.append(f"t{i}")
        else:
            nodes.append(helper.make_node(draw(st.sampled_from(BINARY)), [pick(), pick()], [f"t{i}"]))
            available.append(f"t{i}")
    used = {name for n in nodes for name in n.input}
    outputs = [name for name in available[1:] if name not in used] or [available[-1]]
    graph = helper.make_graph(
        nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, clean


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=random_dag())
def test_planted_template_found_exactly_k_times(case, tmp_path_factory):
    model, clean = case
    result = apply(model, ["softplus"], registry=_registry(tmp_path_factory), validate=False)
    assert result.counts.get("softplus", 0) == clean
    ops = [n.op_type for n in result.model.graph.node] if result.changed else [n.op_type for n in model.graph.node]
    assert ops.count("Softplus") == clean
    if result.changed:
        assert_numerically_equal(model, result.model, atol=1e-5, rtol=1e-4,
                                 inputs={"x": np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)})
