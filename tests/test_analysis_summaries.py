"""Summaries that count what they claim (issue 24, item 7).

A Pad whose pads come from the data (here: "same" padding arithmetic in float, ceil, max, floor, casts, over
values read from the input tensor, not its shape) gives the padded tensor and everything after it dims ONNX
names ``unk__N``: symbols no input gives. ``shapes`` said every tensor had a known shape and ``memory`` gave a
192-byte arena as the plan. Now such a tensor is not "known", the memory plan says it is incomplete and that its
byte counts are lower bounds, and ``profile``/``info`` say their totals are in unknown dims. (The same arithmetic
over ``Shape(x)``, as legacy exports write it, is followed to the end: tests/test_shape_mechanisms.py.) Through
the installed console script.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from hostile.runner import GSREWRITE
from onnx import TensorProto, helper, numpy_helper

#: the tensors whose shape depends on the pads: not known before the model runs
UNKNOWN = ["xp", "y", "z"]


@pytest.fixture(scope="module")
def same_padding(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """x [1, 3, 224, 224] -> Pad("same" for a 3x3 stride-2 Conv, over x's first values) -> Conv -> Relu."""
    def const(name: str, values: list[float], dtype: type) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, dtype), name)

    constants = [const("starts", [2], np.int64), const("ends", [4], np.int64), const("stride", [2.0], np.float32),
                 const("k", [3.0], np.float32), const("one", [1.0], np.float32), const("zero", [0.0], np.float32),
                 const("two", [2.0], np.float32), const("zeros2", [0, 0], np.int64),
                 numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w"),
                 const("corner", [0, 0, 0, 0], np.int64), const("four", [1, 1, 1, 4], np.int64),
                 const("flat", [-1], np.int64)]
    node = helper.make_node
    nodes = [node("Slice", ["x", "corner", "four"], ["xs"]), node("Reshape", ["xs", "flat"], ["xf"]),
             node("Cast", ["xf"], ["s"], to=TensorProto.INT64), node("Slice", ["s", "starts", "ends"], ["hw"]),
             node("Cast", ["hw"], ["hwf"], to=TensorProto.FLOAT), node("Div", ["hwf", "stride"], ["q"]),
             node("Ceil", ["q"], ["outs"]), node("Sub", ["outs", "one"], ["o1"]),
             node("Mul", ["o1", "stride"], ["o2"]), node("Add", ["o2", "k"], ["o3"]),
             node("Sub", ["o3", "hwf"], ["o4"]), node("Max", ["o4", "zero"], ["total"]),
             node("Div", ["total", "two"], ["half"]), node("Floor", ["half"], ["before"]),
             node("Sub", ["total", "before"], ["after"]), node("Cast", ["before"], ["bi"], to=TensorProto.INT64),
             node("Cast", ["after"], ["ai"], to=TensorProto.INT64),
             node("Concat", ["zeros2", "bi", "zeros2", "ai"], ["pads"], axis=0), node("Pad", ["x", "pads"], ["xp"]),
             node("Conv", ["xp", "w"], ["y"], strides=[2, 2]), node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "same_padding",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], constants)
    path = tmp_path_factory.mktemp("summaries") / "same_padding.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _gsrewrite(*args: str | Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(GSREWRITE), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def same_padding_shapes(same_padding: Path) -> dict:
    """``gsrewrite shapes --json`` on :func:`same_padding`, run once for the tests that read it."""
    return json.loads(_gsrewrite("shapes", same_padding, "--json").stdout)


def test_shapes_counts_a_tensor_with_an_unk_dim_as_unknown(same_padding: Path, same_padding_shapes: dict) -> None:
    data = same_padding_shapes
    assert data["unknown"] == UNKNOWN
    assert data["unknown_symbols"] and all(s.startswith("unk__") for s in data["unknown_symbols"])
    text = _gsrewrite("shapes", same_padding).stdout
    assert "31 of 34 tensors have a known shape; 3 do not (their rank or a dim is unknown): xp, y, z" in text
    assert "dims no input gives (known only when the model runs): " + ", ".join(data["unknown_symbols"]) in text


def test_memory_says_its_plan_is_incomplete_and_a_lower_bound(same_padding: Path) -> None:
    data = json.loads(_gsrewrite("memory", same_padding, "--json").stdout)
    assert data["complete"] is False
    assert data["tensors_with_unknown_size"] == ["xp", "y"] and data["inputs_outputs_with_unknown_size"] == ["z"]
    text = _gsrewrite("memory", same_padding).stdout
    for label in ("naive (no reuse)", "planned arena", "lower bound"):
        (row,) = [line for line in text.splitlines() if line.startswith(label + " ")]
        assert " at least " in row, row
    assert "Incomplete plan: 3 tensor(s) have a size unknown before the model runs" in text


def test_profile_and_info_say_their_totals_are_in_unknown_dims(same_padding: Path, same_padding_shapes: dict) -> None:
    unknown = same_padding_shapes["unknown_symbols"]
    profile = json.loads(_gsrewrite("profile", same_padding, "--json").stdout)
    assert profile["unknown_symbols"] == unknown
    assert f"unknown dims      {', '.join(unknown)}: no input gives them" in _gsrewrite("profile", same_padding).stdout
    info = _gsrewrite("info", same_padding).stdout
    assert f"(in dims no input gives, unknown until the model runs: {', '.join(unknown)})" in info


def test_a_model_whose_dims_all_come_from_its_inputs_is_known_and_complete(tmp_path: Path) -> None:
    """The same network with its pads constant, and a dynamic batch: every shape known, the plan complete."""
    nodes = [helper.make_node("Pad", ["x", "pads"], ["xp"]),
             helper.make_node("Conv", ["xp", "w"], ["y"], strides=[2, 2]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 224, 224])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads"),
                               numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")])
    path = tmp_path / "constant_pads.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    shapes = json.loads(_gsrewrite("shapes", path, "--json").stdout)
    assert shapes["unknown"] == [] and shapes["unknown_symbols"] == [] and shapes["outputs"]["z"] == ["n", 8, 112, 112]
    assert "6 of 6 tensors have a known shape\n" in _gsrewrite("shapes", path).stdout
    memory = _gsrewrite("memory", path)
    assert json.loads(_gsrewrite("memory", path, "--json").stdout)["complete"] is True
    assert "at least" not in memory.stdout and "Incomplete" not in memory.stdout
