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
