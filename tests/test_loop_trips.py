"""A Loop that cannot end within the run time limit is refused from the graph before onnxruntime runs anything
(gsrewrite/validation/loop_trips.py), by every command that runs the model, through the installed console script:
one line, exit 2, instead of waiting for the 600 s limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.validation.loop_trips import endless_loop

GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _vi(name: str, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [])


def _body(condition: onnx.NodeProto | None = None, inner: onnx.NodeProto | None = None) -> onnx.GraphProto:
    """v + 1, the condition handed on unchanged (or computed by ``condition``), ``inner`` run in the body too."""
    nodes = [condition or helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Add", ["v", "one"], ["w"])]
    if inner is not None:
        nodes.append(inner)
    return helper.make_graph(nodes, "body", [_vi("i", TensorProto.INT64), _vi("c", TensorProto.BOOL), _vi("v")],
                             [_vi("c2", TensorProto.BOOL), _vi("w")])


def _loop_model(trips: int | None, body: onnx.GraphProto | None = None,
                extra: tuple[onnx.NodeProto, ...] | list[onnx.NodeProto] = ()) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(True), "t"), numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    if trips is not None:
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "n"))
    nodes = [helper.make_node("Loop", ["n" if trips is not None else "", "t", "x"], ["y0"], body=body or _body()),
             helper.make_node("Identity", ["y0"], ["y"]), *extra]  # the Identity: something for optimize to do
    graph = helper.make_graph(nodes, "g", [_vi("x")], [_vi("y")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("command", [["validate", "m.onnx", "m.onnx"], ["shapes", "--check", "m.onnx"],
                                     ["bench", "m.onnx"], ["optimize", "m.onnx", "out.onnx"],
                                     ["extract", "m.onnx", "--inputs", "x", "--outputs", "y", "-o", "out.onnx"],
                                     ["compress", "m.onnx", "out.onnx", "--strategy", "fp16"]])
def test_a_loop_of_2_40_trips_is_refused_before_any_run(tmp_path: Path, command: list[str]) -> None:
    onnx.save(_loop_model(2**40), tmp_path / "m.onnx")
    env = {k: v for k, v in os.environ.items() if k != "GSREWRITE_RUN_TIMEOUT"}  # the default limit, 600 s
    done = subprocess.run([str(GSREWRITE), *command], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "1,099,511,627,776 iterations" in done.stderr and "600 s" in done.stderr  # the estimate, not the timer
    assert not (tmp_path / "out.onnx").exists()


def test_only_loops_that_certainly_run_past_the_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert endless_loop(_loop_model(2**40), 600) is not None
    assert "forever" in (endless_loop(_loop_model(None), 600) or "")
    assert endless_loop(_loop_model(10**6), 600) is None  # 2.7 s in onnxruntime
    assert endless_loop(_loop_model(2**40), 10**4) is not None and endless_loop(_loop_model(10**9), 10**4) is None
    # a condition the body computes may end the loop early: run, under the time limit
    stop = helper.make_node("Less", ["i", "n"], ["c2"])
    assert endless_loop(_loop_model(2**40, _body(stop)), 600) is None
    # nested: 10**5 outer iterations of 10**5 inner ones
    inner = helper.make_node("Loop", ["m", "t", "v"], ["u"], body=_body())
    model = _loop_model(10**5, _body(inner=inner))
    model.graph.initializer.append(numpy_helper.from_array(np.array(10**5, np.int64), "m"))
    assert "100,000 iterations (in 100,000 of an enclosing loop's)" in (endless_loop(model, 600) or "")
    # what runs only in an If branch is not counted (which branch runs is decided by the data)
    branch = helper.make_graph([helper.make_node("Loop", ["n", "t", "x"], ["b"], body=_body())], "then", [], [_vi("b")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e")])
    choice = helper.make_node("If", ["t"], ["z"], then_branch=branch, else_branch=other)
    assert endless_loop(_loop_model(2**40, extra=[choice]), 600) is not None  # the outer loop
    model = _loop_model(1, extra=[choice])
    model.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.array(2**40, np.int64), "n"))
    model.graph.node[0].input[0] = "one_trip"
    model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "one_trip"))
    assert endless_loop(model, 600) is None
