"""Compression fuzzing: small MLP classifiers drawn with weights of every scale (float16 overflows at 1e6), now and
then a NaN/inf weight, and heads whose outputs are logits, labels (ArgMax) or probabilities (Softmax), compressed
by each built-in strategy.

A strategy may refuse (a typed ``CompressionRefused``: out of tolerance, nothing to compress) but what it returns
must hold on inputs validation never saw: the result and the original run in onnxruntime on 200 fresh rows and
are compared with the new metric (``gsrewrite.validation.compare_output`` judged by the strategy's tolerance, the
rates and the cosine given a little slack: 200 fresh rows are not validation's rows). A NaN/inf pattern of its
own always fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.errors import CompressionRefused
from gsrewrite.validation import compare_output
from gsrewrite.validation.class_scores import class_axes
from gsrewrite.validation.criteria import Criterion

from .runner import session

STRATEGIES = ("fp16", "bf16", "dynamic-int8", "int8", "int4")
HEADS = ("logits", "label", "softmax")
#: rows of the fresh inputs the result is checked on
ROWS = 200
#: slack on cosine and on the rates: fresh rows are another sample than validation's
SLACK_COSINE, SLACK_RATE = 0.01, 0.1


@dataclass
class CompressionCase:
    model: onnx.ModelProto
    strategy: str
    label: str


@st.composite
def compression_cases(draw: st.DrawFn) -> CompressionCase:
    features = draw(st.sampled_from([16, 64]))
    hidden = draw(st.sampled_from([64, 128]))
    classes = draw(st.sampled_from([2, 10]))
    scale = draw(st.sampled_from([0.05, 1.0, 1e6]))
    spread = draw(st.sampled_from([1.0, 0.01]))  # 0.01: close logits (labels easy to flip)
    poison = draw(st.sampled_from(["none"] * 4 + ["inf", "nan"]))
    head = draw(st.sampled_from(HEADS))
    strategy = draw(st.sampled_from(STRATEGIES))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((features, hidden)) * scale).astype(np.float32)
    w2 = ((1.0 + spread * rng.standard_normal((hidden, classes))) / np.sqrt(hidden)).astype(np.float32)
    if poison != "none":
        w1[0, 0] = np.inf if poison == "inf" else np.nan
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["logits"], name="head")]
    output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])
    if head == "label":
        nodes.append(helper.make_node("ArgMax", ["logits"], ["label"], axis=-1, keepdims=0))
        output = helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"])
    elif head == "softmax":
        nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=-1))
        output = helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", classes])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])
    graph = helper.make_graph(nodes, "mlp", [x], [output],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    label = (f"{strategy} on x[batch, {features}] -> MatMul {features}x{hidden} (scale {scale:g}, {poison}) -> Relu "
             f"-> MatMul {hidden}x{classes} (spread {spread:g}) -> {head}, seed {seed}")
    return CompressionCase(model, strategy, label)


def check_compression(case: CompressionCase, seed: int = 0) -> str:
    """Compress ``case``; a refusal must be typed; a result must agree with the original on fresh rows by the
    new metric. Returns ``refused`` or ``written``."""
    try:
        result = gsrewrite.compress(case.model, case.strategy, min_elements=1024) if case.strategy.startswith(
            "int") else gsrewrite.compress(case.model, case.strategy)
    except CompressionRefused:
        return "refused"
    assert result.ok, f"[{case.label}] returned a result out of tolerance:\n{result.report()}"
    tolerance = result.tolerance
    slack = Criterion(min_cosine=tolerance.min_cosine - SLACK_COSINE,
                      min_agreement=max(0.0, tolerance.min_agreement - SLACK_RATE),
                      min_top1=None if tolerance.min_top1 is None else max(0.0, tolerance.min_top1 - SLACK_RATE))
    feed = {"x": np.random.default_rng(seed + 1).standard_normal(
        (ROWS, case.model.graph.input[0].type.tensor_type.shape.dim[1].dim_value)).astype(np.float32)}
    names = [o.name for o in case.model.graph.output]
    want, have = session(case.model).run(names, feed), session(result.model).run(names, feed)
    axes = class_axes(case.model)
    for name, a, b in zip(names, want, have, strict=True):
        compared = compare_output(name, 0, a, b, criterion=slack, class_axis=axes.get(name))
        assert compared.ok, (f"[{case.label}] written, but on {ROWS} fresh rows {name}: {compared.describe()} "
                             f"fails {', '.join(compared.failed) or compared.verdict}\n{result.report()}")
    return "written"
