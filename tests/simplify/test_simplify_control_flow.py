"""If/Loop bodies are simplified too, and the model still runs and agrees (a VAD-like gate)."""

from __future__ import annotations

import numpy as np
import onnx

from gsrewrite import validate
from gsrewrite.testing import model_from_text

# A voice-activity-detector-like gate: speech frames go through a small computation, silence gets zeros.
GATE = """
g (float[1, 16] frame, bool[1] speech) => (float[1, 16] out) {
    energy = Mul (frame, frame)
    out = If (speech) <
        then_branch = speech_b () => (float[1, 16] s) {
            half = Div (one, two)
            a = Identity (energy)
            b = Mul (a, half)
            c = Mul (energy, half)
            d = Add (b, c)
            s = Mul (d, one)
        },
        else_branch = silence_b () => (float[1, 16] z) {
            shape = Shape (frame)
            z = ConstantOfShape (shape)
        }>
}"""
CONSTANTS = {"one": np.array(1.0, np.float32), "two": np.array(2.0, np.float32)}


def branch_ops(model: onnx.ModelProto) -> dict[str, list[str]]:
    node = next(n for n in model.graph.node if n.op_type == "If")
    return {a.name: [n.op_type for n in a.g.node] for a in node.attribute}


def test_branches_are_simplified_and_agree(simplified):
    model = model_from_text(GATE, opset=17, initializers=CONSTANTS)
    result = simplified(model, validation_options={"runs": 6})
    ops = branch_ops(result.model)
    assert ops["then_branch"] == ["Mul", "Add"]  # Identity bypassed, 1/2 folded, equal Muls merged, *1 gone
    assert len(ops["else_branch"]) <= 1  # static Shape folded
    for speech in (True, False):  # both branches, explicitly
        feed = {"frame": np.arange(16, dtype=np.float32).reshape(1, 16), "speech": np.array([speech])}
        assert validate(model, result.model, inputs=feed).ok


def test_loop_body_is_simplified(simplified):
    model = model_from_text("""
    g (float[3] x, int64 trips) => (float[3] y) {
        cond = Constant <value = bool {1}> ()
        y = Loop (trips, cond, x) <body = body (int64 i, bool c, float[3] acc) => (bool c_out, float[3] next) {
            c_out = Identity (c)
            scaled = Mul (acc, one)
            next = Add (scaled, step)
        }>
    }""", initializers={"one": np.array(1.0, np.float32), "step": np.array([1.0, 2.0, 3.0], np.float32)})
    result = simplified(model, validation_options={"inputs": {"x": np.zeros(3, np.float32),
                                                              "trips": np.array(4, np.int64)}})
    loop = next(n for n in result.model.graph.node if n.op_type == "Loop")
    body = [n.op_type for n in loop.attribute[0].g.node]
    assert "Mul" not in body and "Add" in body
