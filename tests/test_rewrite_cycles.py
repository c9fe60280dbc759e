"""No rewrite makes a cycle (issue 33 item 6.1): T5's legacy export gave exit 3, "Cycle detected in graph!".

Its attention bias of a layer without relative attention is zeros sized by the keys' length, read by a
``Shape`` of a matched intermediate; the engine pointed that reader at the match's output (same dims), so the
fused attention computed its own mask. The reader now reads a match input, and the replace primitive refuses
any match whose replacement reads a tensor computed from its own output (the reason is in ``explain``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text, op_counts

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
D, H, DH = 32, 4, 8


def _t5_like_bias() -> onnx.ModelProto:
    """One attention block whose additive bias is zeros of [1, H, L, L], L read from the reshaped keys."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((D, D)) * 0.2).astype(np.float32), n)
             for n in ("wq", "wk", "wv", "wo")]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("heads", [0, 0, H, DH]), ("flat", [0, 0, D]), ("one", [1]), ("h", [H]), ("ax1", [1]))]
    inits.append(numpy_helper.from_array(np.array(DH ** -0.5, np.float32), "scale"))
    mk = helper.make_node
    nodes = [mk("MatMul", ["x", w], [o]) for w, o in (("wq", "ql"), ("wk", "kl"), ("wv", "vl"))]
    nodes += [
        mk("Reshape", ["ql", "heads"], ["q3"]), mk("Transpose", ["q3"], ["q"], perm=[0, 2, 1, 3]),
        mk("Reshape", ["kl", "heads"], ["k3"]), mk("Transpose", ["k3"], ["kt"], perm=[0, 2, 3, 1]),
        mk("Reshape", ["vl", "heads"], ["v3"]), mk("Transpose", ["v3"], ["v"], perm=[0, 2, 1, 3]),
        mk("Shape", ["k3"], ["ks"]), mk("Gather", ["ks", "ax1"], ["klen"], axis=0),
        mk("Concat", ["one", "h", "klen", "klen"], ["bshape"], axis=0),
        mk("ConstantOfShape", ["bshape"], ["bias"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
        mk("MatMul", ["q", "kt"], ["s0"]), mk("Mul", ["s0", "scale"], ["s"]),
        mk("Add", ["s", "bias"], ["sm"]), mk("Softmax", ["sm"], ["p"], axis=-1),
        mk("MatMul", ["p", "v"], ["ctx"]), mk("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]),
        mk("Reshape", ["ct", "flat"], ["o"]), mk("MatMul", ["o", "wo"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "t5_bias", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                ["batch", "sequence", D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", D])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=7)


def test_a_bias_sized_by_the_keys_fuses_without_a_cycle() -> None:
    result = assert_rewrite(_t5_like_bias(), ["mha"], {"mha": 1, "attention-packing": 1},
                            produces={"com.microsoft.Attention": 1})
    onnx.checker.check_model(result.model)
    assert "Softmax" not in op_counts(result.model)


def test_the_installed_optimize_exits_0_on_it(tmp_path: Path) -> None:
    model = tmp_path / "t5_bias.onnx"
    onnx.save(_t5_like_bias(), model)
    run = subprocess.run([str(GSREWRITE), "optimize", str(model), "-o", str(tmp_path / "out.onnx")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Cycle" not in run.stderr
    assert "Validation: OK" in run.stdout


# Two outputs: y2 reads w, which is computed from y1 outside the match. The original has no cycle; one fused
# node writing y1 and y2 from x and w would.
TWO_OUTPUTS = """
family = "cycle-test"
[[pattern]]
name = "two-outputs"
description = "Relu then Neg and Add -> one node writing both"
match = '''
two (x, w) => (y1, y2) {
  t = Relu (x)
  y1 = Neg (t)
  y2 = Add (t, w)
}
'''
replace = '''
two (x, w) => (y1, y2) {
  y1, y2 = com.example.Both (x, w)
}
'''
"""
FEEDBACK = """
g (float[2, 4] x) => (float[2, 4] y2) {
  t = Relu (x)
  y1 = Neg (t)
  w = Sigmoid (y1)
  y2 = Add (t, w)
}"""


def test_the_replace_primitive_refuses_a_match_whose_replacement_reads_its_own_output(
        tmp_path: Path, gsrewrite_registry: object) -> None:
    pattern = tmp_path / "two.toml"
    pattern.write_text(TWO_OUTPUTS)
    gsrewrite_registry.add_file(pattern)  # type: ignore[attr-defined]
    result = assert_no_rewrite(model_from_text(FEEDBACK), ["two-outputs"], registry=gsrewrite_registry)
    reason = result.near_misses["two-outputs"].reason
    assert reason.startswith("refused by the engine: its replacement would make a cycle"), reason
    assert "input 'w'" in reason and "output 'y1'" in reason


def test_explain_shows_why_the_engine_refused(tmp_path: Path) -> None:
    pattern, model = tmp_path / "two.toml", tmp_path / "feedback.onnx"
    pattern.write_text(TWO_OUTPUTS)
    onnx.save(model_from_text(FEEDBACK), model)
    run = subprocess.run([str(GSREWRITE), "explain", "--pattern-file", str(pattern), str(model)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "refused by the engine: its replacement would make a cycle" in " ".join(run.stdout.split())
