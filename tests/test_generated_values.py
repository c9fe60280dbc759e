"""Generated input values the model can take, through the installed console script: a value the graph compares an
input with is not taken when the input sizes a tensor the memory budget cannot hold; positions stay within their
integer type."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
#: the address space of the runs: a 7 GB allocation fails there instead of filling the machine
ADDRESS_SPACE = 4 << 30


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    return subprocess.run([str(GSREWRITE), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120,
                          preexec_fn=cap)


def _range_model(path: Path) -> Path:
    """ok = n < 6e8; total = ReduceSum(Cast(Range(0, n, 1))): the compared value would make Range allocate 4.8 GB
    (and its Cast 2.4 GB more)."""
    nodes = [helper.make_node("Less", ["n", "limit"], ["ok"]),
             helper.make_node("Range", ["zero", "n", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["rf"], ["total"], keepdims=0)]
    inits = [numpy_helper.from_array(np.array(value, np.int64), name)
             for name, value in (("limit", 600_000_000), ("zero", 0), ("one", 1))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("ok", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("total", TensorProto.FLOAT, [])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_compared_value_that_sizes_a_tensor_over_the_budget_is_not_generated(tmp_path: Path) -> None:
    _range_model(tmp_path / "r.onnx")
    done = _run("validate", "r.onnx", "r.onnx", "--max-memory", "1GB", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)["inputs"]["n"]["values"]
    assert "compares" not in described and "6e+08" not in described, described
    # with room for it, the compared value is what the input takes (the run itself is not made here)
    from gsrewrite.validation.inputs import plan_inputs
    from gsrewrite.validation.memory import memory_budget
    from gsrewrite.validation.signature import model_inputs

    model = onnx.load(tmp_path / "r.onnx")
    with memory_budget(16 << 30):
        assert plan_inputs(model, model_inputs(model))[0].choices == (6e8,)
    with memory_budget(1 << 30):
        assert plan_inputs(model, model_inputs(model))[0].choices == ()


def _decoder(path: Path, position_type: int) -> Path:
    """A decoder's inputs: position_ids [batch, sequence] of ``position_type``, a mask over past + new tokens and a
    past key [batch, past_sequence, 4]; the outputs read each."""
    inputs = [helper.make_tensor_value_info("position_ids", position_type, ["batch", "sequence"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "past_sequence + sequence"]),
              helper.make_tensor_value_info("past_key", TensorProto.FLOAT, ["batch", "past_sequence", 4])]
    nodes = [helper.make_node("Cast", ["position_ids"], ["y"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["past_key"], ["s"], keepdims=0),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["m"], ["ms"], keepdims=0)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence"]),
               helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
               helper.make_tensor_value_info("ms", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_narrow_position_ids_are_generated_within_their_type(tmp_path: Path) -> None:
    _decoder(tmp_path / "u8.onnx", TensorProto.UINT8)
    _decoder(tmp_path / "i16.onnx", TensorProto.INT16)
    done = _run("validate", "u8.onnx", "u8.onnx", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sizes = {s["name"]: s for s in json.loads(done.stdout)["sizes"]}
    assert sizes["long past"]["shapes"]["past_key"][1] == 255  # the long past capped: its position is 255
    for args in (["bench", "u8.onnx", "--past", "300", "--runs", "1"],
                 ["bench", "u8.onnx", "--new-tokens", "300", "--runs", "1"],
                 ["validate", "i16.onnx", "i16.onnx", "--input-shape", "past_sequence=40000"],
                 ["shapes", "--check", "u8.onnx", "--input-shape", "sequence=300"]):
        refused = _run(*args, cwd=tmp_path)
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr
        assert len(refused.stderr.splitlines()) == 1 and "cannot hold the positions" in refused.stderr, refused.stderr
