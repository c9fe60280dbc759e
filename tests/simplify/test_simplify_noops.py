"""eliminate-noops: every rule bypasses its no-op, and leaves alone look-alikes that do change something."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gsrewrite.testing import model_from_text, op_counts

NOOPS = {
    "identity": "y = Identity (x)",
    "dropout": "y = Dropout (x)",
    "cast-same": "y = Cast <to = 1> (x)",
    "transpose": "y = Transpose <perm = [0, 1, 2]> (x)",
    "reshape": "y = Reshape (x, shape)",
    "reshape-zeros": "y = Reshape (x, zeros)",
    "expand": "y = Expand (x, ones)",
    "slice": "y = Slice (x, starts, ends)",
    "pad": "y = Pad (x, pads)",
    "concat": "y = Concat <axis = 0> (x)",
    "split": "y = Split <axis = 0, num_outputs = 1> (x)",
    "mul-1": "y = Mul (one, x)",
    "add-0": "y = Add (x, zero)",
    "sub-0": "y = Sub (x, zero)",
    "div-1": "y = Div (x, one)",
}
CONSTANTS = {
    "shape": np.array([2, 3, 4], np.int64),
    "zeros": np.array([0, 0, 4], np.int64),
    "ones": np.array([1, 1], np.int64),
    "starts": np.array([0], np.int64),
    "ends": np.array([2**63 - 1], np.int64),
    "pads": np.zeros(6, np.int64),
    "one": np.ones((1, 4), np.float32),
    "zero": np.zeros((3, 1), np.float32),
}


def graph(body: str, out: str = "float[2, 3, 4] z") -> str:
    return f"""
    g (float[2, 3, 4] x) => ({out}) {{
        {body}
        z = Relu (y)
    }}"""


def used_constants(body: str, table: dict[str, np.ndarray] = CONSTANTS) -> dict[str, np.ndarray]:
    words = set(re.findall(r"\w+", body))
    return {k: v for k, v in table.items() if k in words}


@pytest.mark.parametrize("case", sorted(NOOPS))
def test_noop_is_bypassed(simplified, case):
    body = NOOPS[case]
    model = model_from_text(graph(body), opset=18, initializers=used_constants(body))
    result = simplified(model, "eliminate-noops")
    assert op_counts(result.model) == {"Relu": 1}
    assert result.counts == {"eliminate-noops": 1}


NOT_NOOPS = {
    "mul-broadcasts": ("y = Mul (x, one5)", "float[5, 2, 3, 4] z"),
    "zero-minus-x": ("y = Sub (zero, x)", "float[2, 3, 4] z"),
    "cast-other": ("y = Cast <to = 10> (x)", "float16[2, 3, 4] z"),
    "transpose-swaps": ("y = Transpose <perm = [0, 2, 1]> (x)", "float[2, 4, 3] z"),
    "slice-drops": ("y = Slice (x, one_i, ends)", "float[1, 3, 4] z"),
    "reshape-changes": ("y = Reshape (x, flat)", "float[6, 4] z"),
    "mul-by-two": ("y = Mul (x, two)", "float[2, 3, 4] z"),
}
MORE = {
    "one5": np.ones((5, 1, 1, 1), np.float32),
    "one_i": np.array([1], np.int64),
    "flat": np.array([6, 4], np.int64),
    "two": np.full((1,), 2, np.float32),
}


@pytest.mark.parametrize("case", sorted(NOT_NOOPS))
def test_lookalike_is_kept(simplified, case):
    body, out = NOT_NOOPS[case]
    model = model_from_text(graph(body, out), opset=18,
                            initializers=used_constants(body) | used_constants(body, MORE))
    result = simplified(model, "eliminate-noops")
    assert sum(op_counts(result.model).values()) == 2
    assert not result.counts


def test_training_dropout_is_kept(simplified):
    model = model_from_text("""
    g (float[2, 3] x) => (float[2, 3] y) {
        t = Constant <value = bool {1}> ()
        y = Dropout (x, ratio, t)
    }""", opset=15, initializers={"ratio": np.array(0.0, np.float32)})
    result = simplified(model, "eliminate-noops", validate=False)
    assert op_counts(result.model) == {"Dropout": 1}


def test_identity_writing_a_graph_output_keeps_the_output_name(simplified):
    model = model_from_text("""
    g (float[2, 3] x) => (float[2, 3] y) {
        r = Relu (x)
        y = Identity (r)
    }""")
    result = simplified(model, "eliminate-noops")
    assert op_counts(result.model) == {"Relu": 1}
    assert result.model.graph.node[0].output[0] == "y"


def test_identity_from_graph_input_to_output_stays(simplified):
    model = model_from_text("""
    g (float[2, 3] x) => (float[2, 3] y) {
        y = Identity (x)
    }""")
    result = simplified(model, "eliminate-noops")
    assert op_counts(result.model) == {"Identity": 1}
