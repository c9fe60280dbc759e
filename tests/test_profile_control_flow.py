"""Profiling inside local functions and control flow: a function's nodes are counted (inlined), If counts its
larger branch, Loop its body times a constant trip count, Scan its body times the scanned length; what cannot
be counted is unknown, never 0, and hostile nesting or expansion is bounded."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.profiling import subgraphs
from gsrewrite.shapes.symdim import sym

OPSET = [helper.make_opsetid("", 17)]


def _weight(shape: tuple[int, ...], name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones(shape, np.float32), name)


def _vi(name: str, dims: list | None, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _model(nodes: list, inputs: list, outputs: list, inits: list, **kwargs) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits), ir_version=8,
                             opset_imports=kwargs.pop("opsets", OPSET), **kwargs)


def test_a_local_function_is_counted_like_its_body() -> None:
    body = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["c"])]
    function = helper.make_function("local", "Lin", ["a", "b"], ["c"], body, OPSET)
    called = _model([helper.make_node("Lin", ["x", "w"], ["y"], domain="local", name="call")],
                    [_vi("x", ["N", 64])], [_vi("y", ["N", 32])], [_weight((64, 32), "w")],
                    opsets=[*OPSET, helper.make_opsetid("local", 1)], functions=[function])
    plain = _model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                   [_vi("x", ["N", 64])], [_vi("y", ["N", 32])], [_weight((64, 32), "w")])
    profile = gsrewrite.profile(called)
    assert profile.macs == gsrewrite.profile(plain).macs == (64 * 32 + 32) * sym("N")
    assert not profile.unprofiled and sorted(n.op_type for n in profile.nodes) == ["MatMul", "Relu"]


def _if_model() -> onnx.ModelProto:
    then_branch = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"])], "then", [],
                                    [_vi("t", ["N", 32])])
    else_branch = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["e0"]),
                                     helper.make_node("MatMul", ["e0", "w2"], ["e"])], "else", [],
                                    [_vi("e", ["N", 32])])
    return _model([helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
                  [_vi("x", ["N", 64]), _vi("c", [], TensorProto.BOOL)], [_vi("y", ["N", 32])],
                  [_weight((64, 32), "w"), _weight((32, 32), "w2")])


def test_if_counts_its_larger_branch_reading_outer_values() -> None:
    profile = gsrewrite.profile(_if_model())
    assert profile.macs == (64 * 32 + 32 * 32) * sym("N")
    assert profile.bind({"N": 3}).macs == 3 * (64 * 32 + 32 * 32)


def _loop_model(trips: onnx.TensorProto | None) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "w2"], ["h_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("c_in", [], TensorProto.BOOL), _vi("h_in", None)],
        [_vi("c_out", [], TensorProto.BOOL), _vi("h_out", None)])
    inputs = [_vi("h0", ["N", 32])] + ([] if trips is not None else [_vi("M", [], TensorProto.INT64)])
    inits = [_weight((32, 32), "w2")] + ([trips] if trips is not None else [])
    return _model([helper.make_node("Loop", ["M", "", "h0"], ["h"], body=body)], inputs, [_vi("h", ["N", 32])],
                  inits)


def test_loop_counts_its_body_times_a_constant_trip_count_else_unknown() -> None:
    counted = gsrewrite.profile(_loop_model(numpy_helper.from_array(np.array(5, np.int64), "M")))
    assert counted.macs == 5 * 32 * 32 * sym("N")
    unknown = gsrewrite.profile(_loop_model(None))
    assert unknown.nodes[0].macs is None and unknown.unprofiled == {"Loop": 1}


def test_scan_counts_its_body_times_the_scanned_length() -> None:
    body = helper.make_graph([helper.make_node("MatMul", ["x_t", "w2"], ["p"]),
                              helper.make_node("Add", ["s_in", "p"], ["s_out"])], "body",
                             [_vi("s_in", None), _vi("x_t", None)], [_vi("s_out", None)])
    model = _model([helper.make_node("Scan", ["s0", "xs"], ["s"], body=body, num_scan_inputs=1)],
                   [_vi("s0", ["N", 32]), _vi("xs", ["T", "N", 32])], [_vi("s", ["N", 32])],
                   [_weight((32, 32), "w2")])
    profile = gsrewrite.profile(model)
    assert profile.macs == (32 * 32 + 32) * sym("N") * sym("T")
    assert profile.bind({"N": 2, "T": 7}).macs == 14 * (32 * 32 + 32)


def test_nesting_past_the_depth_limit_is_unknown_not_a_crash() -> None:
    inner = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"])], "leaf", [], [_vi("t", ["N", 32])])
    for level in range(subgraphs.MAX_DEPTH + 2):
        inner = helper.make_graph([helper.make_node("If", ["c"], [f"o{level}"], then_branch=inner,
                                                    else_branch=inner)], f"g{level}", [],
                                  [_vi(f"o{level}", ["N", 32])])
    model = _model(list(inner.node), [_vi("x", ["N", 64]), _vi("c", [], TensorProto.BOOL)],
                   [_vi(inner.output[0].name, ["N", 32])], [_weight((64, 32), "w")])
    profile = gsrewrite.profile(model)
    assert profile.nodes[0].macs is None and profile.unprofiled == {"If": 1}


def test_recursive_and_exploding_functions_stay_unprofiled_calls() -> None:
    recursive = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="local")],
                                     [*OPSET, helper.make_opsetid("local", 1)])
    model = _model([helper.make_node("F", ["x"], ["y"], domain="local")], [_vi("x", [4])], [_vi("y", [4])], [],
                   opsets=[*OPSET, helper.make_opsetid("local", 1)], functions=[recursive])
    assert gsrewrite.profile(model).unprofiled == {"local.F": 1}

    assert gsrewrite.profile(_function_bomb()).unprofiled == {"local.f0": 1}


def _function_bomb(levels: int = 30) -> onnx.ModelProto:
    """f0 calls f1 twice, ...: 2**levels nodes once expanded."""
    opsets = [*OPSET, helper.make_opsetid("local", 1)]
    functions = [helper.make_function("local", f"f{i}", ["a"], ["b"],
                                      [helper.make_node(f"f{i + 1}", ["a"], ["m"], domain="local"),
                                       helper.make_node(f"f{i + 1}", ["m"], ["b"], domain="local")], opsets)
                 for i in range(levels)]
    functions.append(helper.make_function("local", f"f{levels}", ["a"], ["b"],
                                          [helper.make_node("Relu", ["a"], ["b"])], OPSET))
    return _model([helper.make_node("f0", ["x"], ["y"], domain="local")], [_vi("x", [4])], [_vi("y", [4])], [],
                  opsets=opsets, functions=functions)


def test_the_memory_plan_sees_the_tensors_inside_a_local_function() -> None:
    body = [helper.make_node("Relu", ["a"], ["m"]), helper.make_node("Neg", ["m"], ["c"])]
    function = helper.make_function("local", "Two", ["a"], ["c"], body, OPSET)
    model = _model([helper.make_node("Two", ["x"], ["y"], domain="local", name="call")],
                   [_vi("x", [256])], [_vi("y", [256])], [],
                   opsets=[*OPSET, helper.make_opsetid("local", 1)], functions=[function])
    plan = gsrewrite.plan_memory(model)
    planned = [b.tensor for b in plan.buffers]
    assert [name for name in planned if name.startswith("m")], planned  # the function's Relu output (renamed)
    assert not plan.unknown


def test_the_memory_plan_says_it_leaves_control_flow_bodies_out(tmp_path) -> None:
    """The tensors inside If/Loop/Scan bodies are not planned: the plan says so (incomplete, "at least") instead of
    presenting the outer graph's arena as the whole."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    plan = gsrewrite.plan_memory(_if_model(), {"N": 3})
    assert plan.in_subgraphs == ["e0"] and not plan.complete and not plan.unknown
    assert gsrewrite.plan_memory(_loop_model(numpy_helper.from_array(np.array(5, np.int64), "M")),
                                 {"N": 3}).in_subgraphs == []  # the body computes only its outputs
    onnx.save(_if_model(), tmp_path / "if.onnx")
    gsrewrite_cli = Path(sys.executable).parent / "gsrewrite"
    done = subprocess.run([str(gsrewrite_cli), "memory", str(tmp_path / "if.onnx"), "--input-shape", "N=3"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "inside If/Loop/Scan bodies" in done.stdout and "at least" in done.stdout
    done = subprocess.run([str(gsrewrite_cli), "memory", str(tmp_path / "if.onnx"), "--input-shape", "N=3",
                           "--json"], capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    assert report["tensors_in_subgraphs"] == ["e0"] and report["complete"] is False


def test_the_installed_cli_profiles_an_if_and_answers_a_function_bomb_at_once(tmp_path) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    gsrewrite_cli = Path(sys.executable).parent / "gsrewrite"
    onnx.save(_if_model(), tmp_path / "if.onnx")
    done = subprocess.run([str(gsrewrite_cli), "profile", str(tmp_path / "if.onnx"), "--input-shape", "N=3",
                           "--format", "json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["total"]["macs"] == 3 * (64 * 32 + 32 * 32) and report["unprofiled"] == {}

    onnx.save(_function_bomb(), tmp_path / "bomb.onnx")
    for command in (["info"], ["optimize", "-o", str(tmp_path / "out.onnx")]):
        done = subprocess.run([str(gsrewrite_cli), *command, str(tmp_path / "bomb.onnx")], capture_output=True,
                              text=True, timeout=60)  # minutes before the fix, in native code
        assert done.returncode in (0, 2) and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2 and "expand to more than" in done.stderr
    assert not (tmp_path / "out.onnx").exists()
