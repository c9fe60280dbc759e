"""merge-transposes, merge-reshapes, merge-squeezes, merge-casts: consecutive nodes merged when exact."""

from __future__ import annotations

import numpy as np
import pytest

from gsrewrite.testing import model_from_text, op_counts


def test_transposes_compose(simplified):
    model = model_from_text("""
    g (float[2, 3, 4] x) => (float[4, 2, 3] y) {
        a = Transpose <perm = [1, 0, 2]> (x)
        y = Transpose <perm = [2, 1, 0]> (a)
    }""")
    result = simplified(model, "merge-transposes")
    assert op_counts(result.model) == {"Transpose": 1}
    assert list(result.model.graph.node[0].attribute[0].ints) == [2, 0, 1]


def test_transposes_that_cancel_disappear(simplified):
    model = model_from_text("""
    g (float[2, 3, 4] x) => (float[2, 3, 4] y) {
        a = Transpose <perm = [0, 2, 1]> (x)
        b = Transpose <perm = [0, 2, 1]> (a)
        y = Relu (b)
    }""")
    assert op_counts(simplified(model, "merge-transposes").model) == {"Relu": 1}


def test_transposes_apart_are_kept(simplified):
    model = model_from_text("""
    g (float[2, 3, 4] x) => (float[2, 3, 4] y) {
        a = Transpose <perm = [0, 2, 1]> (x)
        b = Relu (a)
        y = Transpose <perm = [0, 2, 1]> (b)
    }""")
    result = simplified(model, "merge-transposes")
    assert op_counts(result.model) == {"Transpose": 2, "Relu": 1}


def test_reshape_skips_reshaping_nodes(simplified):
    model = model_from_text("""
    g (float[2, 3, 4] x) => (float[4, 6] y) {
        a = Flatten <axis = 1> (x)
        b = Unsqueeze (a, zero)
        y = Reshape (b, shape)
    }""", initializers={"zero": np.array([0], np.int64), "shape": np.array([4, 6], np.int64)})
    result = simplified(model, "merge-reshapes", "eliminate-dead-code")
    assert op_counts(result.model) == {"Reshape": 1}


def test_reshape_copying_dims_is_kept(simplified):
    model = model_from_text("""
    g (float[2, 12] x) => (float[2, 3, 4] y) {
        a = Reshape (x, first)
        y = Reshape (a, second)
    }""", initializers={"first": np.array([2, 3, 4], np.int64), "second": np.array([0, 0, -1], np.int64)})
    assert op_counts(simplified(model, "merge-reshapes").model) == {"Reshape": 2}


@pytest.mark.parametrize(("first", "second", "out", "expected"), [
    ("Unsqueeze (x, a0)", "Unsqueeze (u, a2)", "1, 3, 1, 1, 1, 4", {"Unsqueeze": 1}),
    ("Unsqueeze (x, a0)", "Squeeze (u, a0)", "3, 1, 1, 4", {}),
    ("Squeeze (x, a1)", "Squeeze (u, a1)", "3, 4", {"Squeeze": 1}),
])
def test_squeezes_merge(simplified, first, second, out, expected):
    model = model_from_text(f"""
    g (float[3, 1, 1, 4] x) => (float[{out}] y) {{
        u = {first}
        v = {second}
        y = Identity (v)
    }}""", initializers={"a0": np.array([0], np.int64), "a1": np.array([1], np.int64),
                         "a2": np.array([2], np.int64)})
    result = simplified(model, "merge-squeezes", "eliminate-dead-code")
    assert op_counts(result.model) == {"Identity": 1, **expected}


def test_squeeze_then_unsqueeze_elsewhere_is_kept(simplified):
    model = model_from_text("""
    g (float[3, 1, 4] x) => (float[3, 4, 1] y) {
        u = Squeeze (x, a1)
        y = Unsqueeze (u, a2)
    }""", initializers={"a1": np.array([1], np.int64), "a2": np.array([2], np.int64)})
    assert op_counts(simplified(model, "merge-squeezes").model) == {"Squeeze": 1, "Unsqueeze": 1}


def test_lossless_casts_merge(simplified):
    model = model_from_text("""
    g (float16[2, 3] x) => (double[2, 3] y) {
        a = Cast <to = 1> (x)
        y = Cast <to = 11> (a)
    }""")
    result = simplified(model, "merge-casts", "eliminate-dead-code")
    assert op_counts(result.model) == {"Cast": 1}


def test_widening_and_back_is_removed(simplified):
    model = model_from_text("""
    g (int32[2, 3] x) => (int32[2, 3] y) {
        a = Cast <to = 7> (x)
        b = Cast <to = 6> (a)
        y = Neg (b)
    }""")
    assert op_counts(simplified(model, "merge-casts", "eliminate-dead-code").model) == {"Neg": 1}


@pytest.mark.parametrize(("src", "mid", "dst"), [("float", 6, 1), ("float", 10, 1), ("int64", 1, 7)])
def test_lossy_casts_are_kept(simplified, src, mid, dst):
    out = {1: "float", 7: "int64"}[dst]
    model = model_from_text(f"""
    g ({src}[2, 3] x) => ({out}[2, 3] y) {{
        a = Cast <to = {mid}> (x)
        y = Cast <to = {dst}> (a)
    }}""")
    assert op_counts(simplified(model, "merge-casts").model) == {"Cast": 2}
