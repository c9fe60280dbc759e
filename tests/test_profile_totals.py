"""Profile totals and memory plans once every input is sized (issue 28, item 3): on every model of the shape
mechanisms (tests/fixtures/shape_mechanisms.py) and the real-world-shaped fixtures, ``profile``'s totals are
numbers with no node left unprofiled, and ``memory``'s plan is complete and never smaller than the largest
intermediate tensor."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from hostile.runner import GSREWRITE

import gsrewrite
from gsrewrite.profiling.costs import item_bits
from gsrewrite.shapes import symdim

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))

import real_world
import shape_mechanisms


def _models() -> dict[str, tuple[onnx.ModelProto, dict[str, list[int]]]]:
    models = dict(shape_mechanisms.build_all())
    for name, (model, feeds) in real_world.build_all().items():
        models[f"real_world.{name}"] = (model, {k: list(v.shape) for k, v in feeds.items() if v.ndim})
    return models


MODELS = _models()
#: a custom op no profiler knows
CUSTOM = {"bound_floor": {"com.example.tests.Halve": 1}}


def _given(sizes: dict[str, list[int]]) -> list[str]:
    return [f"{name}:{','.join(map(str, dims))}" for name, dims in sizes.items()]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_profile_totals_are_numbers_when_every_input_is_sized(name: str) -> None:
    model, sizes = MODELS[name]
    profile = gsrewrite.profile(model, _given(sizes), sparsity=False)
    assert isinstance(profile.macs, int) and profile.macs > 0
    assert isinstance(profile.activation_bytes, int)
    assert profile.symbols() == [] and profile.unknown_symbols() == []
    assert profile.unprofiled == CUSTOM.get(name, {})


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("sized", [True, False])
def test_memory_plan_holds_the_largest_intermediate_tensor(name: str, sized: bool) -> None:
    model, sizes = MODELS[name]
    given = _given(sizes) if sized else []
    plan = gsrewrite.plan_memory(model, given)
    shapes = gsrewrite.infer_shapes(model, given)
    scope = {**shapes.bindings, **plan.bindings}
    outputs = {o.name for o in model.graph.output}
    largest = 0
    for node in model.graph.node:
        for tensor in node.output:
            info = shapes.tensors.get(tensor)
            if node.op_type == "Constant" or not tensor or tensor in outputs or info is None or info.shape is None:
                continue
            elements = math.prod(symdim.evaluate(d, scope) for d in info.shape if d is not None)
            largest = max(largest, elements * item_bits(info.dtype) // 8)
    assert not (plan.unknown or plan.unknown_io) or not sized  # every size known (bodies are listed apart)
    assert plan.complete == (not (plan.unknown or plan.unknown_io or plan.in_subgraphs))
    assert plan.arena_bytes >= largest > 0


def test_recurrent_cells_are_counted_by_hand() -> None:
    """batch 3, 7 steps, 6 inputs, hidden 8. Per direction, step and batch row:
    LSTM (bidirectional, biases): 32 x (6 + 8) + 8 x (3 sigmoids 37 + 2 tanhs 38 + 4 multiply/add + 4 gate adds)
    + 2 x 32 bias adds = 448 + 1560 + 64 = 2072, x 2 directions x 21 = 87,024;
    GRU (16 inputs): 24 x 24 + 8 x (2 x 37 + 38 + 1 + 4 + 3) = 1,536, x 21 = 32,256;
    RNN: 8 x 16 + 8 x (38 + 1) = 440, x 21 = 9,240; the MatMul 3 x 7 x 3 x 8 = 504."""
    model, sizes = MODELS["recurrent"]
    profile = gsrewrite.profile(model, _given(sizes), sparsity=False)
    by_op = {op: total.macs for op, total in profile.by_op_type().items()}
    assert by_op["LSTM"] == 87_024 and by_op["GRU"] == 32_256 and by_op["RNN"] == 9_240
    assert profile.macs == 87_024 + 32_256 + 9_240 + 504
    symbolic = gsrewrite.profile(model, sparsity=False).macs
    assert str(symbolic) == "6144*batch*seq_len"  # (2072 x 2 + 1536 + 440 + 24) per batch row and step


def test_profile_and_memory_cli_with_sized_inputs(tmp_path: Path) -> None:
    model, sizes = MODELS["same_pad"]
    path = tmp_path / "same_pad.onnx"
    onnx.save(model, path)

    def run(*args: str) -> dict:
        done = subprocess.run([str(GSREWRITE), *args, str(path), "--json", "--input-shape", _given(sizes)[0]],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    profile = run("profile")
    assert isinstance(profile["total"]["macs"], int) and profile["unknown_symbols"] == [] and not profile["unprofiled"]
    memory = run("memory")
    assert memory["complete"] is True and memory["tensors_with_unknown_size"] == []


def test_conv_transpose_counts_what_the_conv_it_transposes_counts() -> None:
    """ConvTranspose x [1, 8, 5, 5], W [8, 4, 3, 3], stride 2, pads 1, output_padding 1 -> y [1, 4, 10, 10].
    By hand: every input element meets every weight of its input channel once: 8 x 5 x 5 x (4 x 3 x 3) = 7,200
    multiply-adds, + 400 bias adds = 7,600; the Conv it is the transpose of (y -> x, same weights) counts the
    same 7,200 (200 outputs x 36). Of those, 8 x 4 x 14 x 14 = 6,272 land inside the output (the taps that fall
    on the cropped border are computed by the GEMM + col2im kernels all the same, as a Conv's padding taps are).
    onnx-tool counts output elements x (4 x 3 x 3) = 14,400 + 400: the Conv formula on the upsampled output, too
    much by (C_out x H_out x W_out) / (C_in x H_in x W_in) = 2 here (docs/profile.md)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(4, np.float32), "b")

    def single(node: onnx.NodeProto, x: list[int], y: list[int]) -> onnx.ModelProto:
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], [weights, bias])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])

    up = single(helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                                 output_padding=[1, 1]), [1, 8, 5, 5], [1, 4, 10, 10])
    down = single(helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1]), [1, 4, 10, 10],
                  [1, 8, 5, 5])
    assert gsrewrite.infer_shapes(up).shape("y") == [1, 4, 10, 10]
    assert gsrewrite.profile(up, sparsity=False).macs == 8 * 5 * 5 * 4 * 3 * 3 + 400 == 7_600
    assert gsrewrite.profile(down, sparsity=False).macs == 8 * 5 * 5 * 4 * 3 * 3
    # the taps inside the output, counted one by one
    inside = sum(1 for i in range(5) for k in range(3) if 0 <= 2 * i - 1 + k < 10)
    assert 8 * 4 * inside * inside == 6_272


def test_clip_counts_a_compare_per_bound() -> None:
    """Clip(x, 0, 6) is min(max(x, 0), 6): two compares per element (onnx-tool counts 2 too); one bound, one."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    bounds = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["both"]), helper.make_node("Clip", ["x", "", "hi"], ["top"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("both", "top")],
                              bounds)
    profile = gsrewrite.profile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), sparsity=False)
    assert [node.macs for node in profile.nodes] == [20, 10]
