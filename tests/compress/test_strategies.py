"""Every built-in strategy on a small model built here: it runs in onnxruntime, shrinks what it should, meets its
tolerance; the fp16 keep list; opset handling of --target onnx; bisection of a weight that breaks the
tolerance; the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.cli import main
from gsrewrite.errors import UsageError

F = TensorProto.FLOAT


def _mlp(opset: int = 17, outlier: bool = False) -> onnx.ModelProto:
    """x[b, s, 64] -> MatMul 64x128 -> Relu -> MatMul 128x64 -> + x -> Pow 2 -> ReduceMean -> Range-free output."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((64, 128)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((128, 64)) * 0.1).astype(np.float32)
    if outlier:
        # hidden unit 5 is always 0 (its w1 column is zero), so row 5 of w2 never counts; its huge values make
        # the 4-bit scale of every block holding them so coarse that the rest of those blocks rounds to 0
        w1[:, 5] = 0.0
        w2[5, :] = 40.0
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["o"], name="down"), helper.make_node("Add", ["o", "x"], ["y"]),
             helper.make_node("Pow", ["y", "two"], ["p"], name="square"),
             helper.make_node("ReduceMean", ["p"], ["z"], keepdims=1, axes=[-1]) if opset < 18 else
             helper.make_node("ReduceMean", ["p", "axes"], ["z"], keepdims=1)]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
    outputs = [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("z", F, None)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", F, ["b", "s", 64])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _runs(model: onnx.ModelProto) -> None:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((1, 3, 64), np.float32)})


@pytest.mark.parametrize(("strategy", "options", "max_weight_ratio"), [
    ("fp16", {}, 0.51), ("bf16", {"min_elements": 16}, 0.51), ("dynamic-int8", {}, 0.27),
    ("int8", {}, 0.30), ("int4", {}, 0.17), ("int8", {"target": "onnx"}, 0.27),
    ("int8", {"target": "onnx", "granularity": "tensor", "symmetric": False}, 0.27),
    ("static-int8", {}, 0.27)])
def test_each_strategy_runs_shrinks_and_meets_its_tolerance(strategy, options, max_weight_ratio) -> None:
    result = gsrewrite.compress(_mlp(), strategy, **options)
    assert result.validated and result.ok, result.report()
    before, after = result.weight_bytes
    assert after <= max_weight_ratio * before, result.report()
    _runs(result.model)
    assert all(o.cosine is not None and o.cosine >= result.tolerance.min_cosine for o in result.outputs)


def test_int4_onnx_target_needs_opset_21_unless_allowed() -> None:
    with pytest.raises(UsageError, match="opset 21"):
        gsrewrite.compress(_mlp(opset=17), "int4", target="onnx")
    result = gsrewrite.compress(_mlp(opset=17), "int4", target="onnx", allow_opset_upgrade=True)
    assert result.ok and result.model.opset_import[0].version == 21
    dq = [n for n in result.model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 2 and all(any(a.name == "block_size" for a in n.attribute) for n in dq)
    codes = {t.name: t.data_type for t in result.model.graph.initializer}
    assert TensorProto.INT4 in codes.values() and TensorProto.UINT4 not in codes.values()  # default: symmetric
    zero_points = gsrewrite.compress(_mlp(opset=17), "int4", target="onnx", allow_opset_upgrade=True,
                                     symmetric=False)
    assert TensorProto.UINT4 in {t.data_type for t in zero_points.model.graph.initializer}
    _runs(result.model)


def test_fp16_keeps_io_float32_and_range_sensitive_ops_float32() -> None:
    result = gsrewrite.compress(_mlp(), "fp16")
    graph = result.model.graph
    assert [i.type.tensor_type.elem_type for i in graph.input] == [F]
    assert {o.type.tensor_type.elem_type for o in graph.output} == {F}
    pow_node = next(n for n in graph.node if n.op_type == "Pow")
    producer = {o: n for n in graph.node for o in n.output}
    feeding = producer.get(pow_node.input[0])
    assert feeding is not None and feeding.op_type == "Cast"  # Pow computes in float32
    assert any("Pow" in note for note in result.notes)
    weights = {t.name: t.data_type for t in graph.initializer}
    assert weights["w1"] == TensorProto.FLOAT16


def test_fp16_keeps_a_weight_beyond_its_range_float32_and_says_so() -> None:
    model = _mlp()
    big = numpy_helper.to_array(model.graph.initializer[0]).copy()
    big[0, 0] = 1e6
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(big, "w1"))
    result = gsrewrite.compress(model, "fp16", validate=False)
    assert any("beyond float16's range" in note and "w1" in note for note in result.notes)
    assert {t.name: t.data_type for t in result.model.graph.initializer}["w1"] == F


def test_a_weight_that_breaks_the_tolerance_is_bisected_out() -> None:
    result = gsrewrite.compress(_mlp(outlier=True), "int4", min_cosine=0.99)
    assert result.ok and result.excluded == ["down"], result.report()
    assert [n.op_type for n in result.model.graph.node].count("MatMulNBits") == 1


def test_unknown_strategy_and_options_are_one_clear_error() -> None:
    with pytest.raises(UsageError, match="did you mean 'int8' or 'int4'"):
        gsrewrite.compress(_mlp(), "int5")
    with pytest.raises(UsageError, match="no option 'block_size'"):
        gsrewrite.compress(_mlp(), "fp16", block_size=32)


def test_cli(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_mlp(), model)
    runner = CliRunner()
    listed = runner.invoke(main, ["compress", "--list"])
    assert listed.exit_code == 0 and "int4" in listed.output and "dynamic-int8" in listed.output
    done = runner.invoke(main, ["compress", str(model), str(tmp_path / "q.onnx"), "--strategy", "int4",
                                "--bench-runs", "3", "--allow-slower", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["ok"] and data["weight_bytes"]["ratio"] < 0.2 and data["latency_ms"]["before"] > 0
    assert onnx.load(tmp_path / "q.onnx").graph.node[0].op_type == "MatMulNBits"
    again = runner.invoke(main, ["compress", str(model), str(tmp_path / "q.onnx"), "--strategy", "int4"])
    assert again.exit_code == 2 and "--force" in again.output
    bad = runner.invoke(main, ["compress", str(model), "-o", str(tmp_path / "r.onnx"), "--strategy", "fp16",
                               "--block-size", "32"])
    assert bad.exit_code == 2 and "no option" in bad.output and not (tmp_path / "r.onnx").exists()
    fused = runner.invoke(main, ["optimize", str(model), "-o", str(tmp_path / "f.onnx"), "--compress", "int8"])
    assert fused.exit_code == 0, fused.output
    assert "int8" in fused.output and (tmp_path / "f.onnx").exists()


def test_static_int8_calibrates_on_given_inputs(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    folder = tmp_path / "calibration"
    folder.mkdir()
    for i in range(3):
        np.savez(folder / f"set{i}.npz", x=rng.standard_normal((2, 5, 64)).astype(np.float32))
    result = gsrewrite.compress(_mlp(), "static-int8", calibration=str(folder))
    assert result.ok and any("3 input set(s) from given inputs" in note for note in result.notes)
    assert any(n.op_type == "QuantizeLinear" for n in result.model.graph.node)
    with pytest.raises(UsageError, match=r"no \.npz file"):
        gsrewrite.compress(_mlp(), "static-int8", calibration=str(tmp_path))


def _unnamed(model: onnx.ModelProto) -> onnx.ModelProto:
    for node in model.graph.node:
        node.ClearField("name")
    return model


def test_fp16_keeps_a_beyond_range_weight_float32_in_unnamed_nodes_too() -> None:
    model = _unnamed(_mlp())
    big = numpy_helper.to_array(model.graph.initializer[0]).copy()
    big[0, 0] = 1e6
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(big, "w1"))
    result = gsrewrite.compress(model, "fp16", validate=False)
    assert {t.name: t.data_type for t in result.model.graph.initializer}["w1"] == F
    matmul = next(n for n in result.model.graph.node if "w1" in n.input)
    assert matmul.name == "MatMul_0"  # named for the converter's block list, and so kept float32
    assert not any(n.name for n in model.graph.node)  # the caller's model is not renamed


def test_dynamic_int8_can_leave_out_a_node_that_had_no_name() -> None:
    model = _unnamed(_mlp())
    both = gsrewrite.compress(model, "dynamic-int8", validate=False)
    assert both.census is not None and both.census.quantized == {"MatMulInteger": 2}
    one = gsrewrite.compress(model, "dynamic-int8", validate=False, exclude=["MatMul_2"])
    assert one.census is not None and one.census.quantized == {"MatMulInteger": 1}
    assert one.census.kept == {"MatMul": 1}
    assert any(n.op_type == "MatMul" and n.name == "MatMul_2" for n in one.model.graph.node)


def test_int8_on_conv_weights_at_opset_17_is_per_channel_and_runs() -> None:
    """--target ort (the default) is blocked for MatMulNBits; a Conv weight gets a DequantizeLinear, which takes
    blocks only from opset 21: per output channel instead (before, onnxruntime rejected the model)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                              [helper.make_tensor_value_info("x", F, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("y", F, None)], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = gsrewrite.compress(model, "int8")
    assert result.ok, result.report()
    dq = next(n for n in result.model.graph.node if n.op_type == "DequantizeLinear")
    assert {a.name: a.i for a in dq.attribute} == {"axis": 0}
    assert any("per output channel" in note for note in result.notes)
    session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.ones((1, 16, 8, 8), np.float32)})[0].shape == (1, 32, 8, 8)


def test_refusals_are_typed_and_carry_what_was_measured() -> None:
    """Library users get the exception class (exit code 1 on the CLI) and the result with its numbers."""
    from gsrewrite.errors import CompressionRefused, NothingToCompressError, OutOfToleranceError

    conv = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                             [helper.make_tensor_value_info("x", F, [1, 16, 8, 8])],
                             [helper.make_tensor_value_info("y", F, None)],
                             [numpy_helper.from_array(np.ones((32, 16, 3, 3), np.float32), "w")])
    with pytest.raises(NothingToCompressError, match="nothing to compress: int4 changed no weight") as nothing:
        gsrewrite.compress(helper.make_model(conv, opset_imports=[helper.make_opsetid("", 17)]), "int4")
    assert nothing.value.exit_code == 1 and nothing.value.result.census.kept == {"Conv": 1}
    with pytest.raises(OutOfToleranceError, match=r"misses the tolerance \(y: cosine 0\.9") as missed:
        gsrewrite.compress(_mlp(outlier=True), "int4", min_cosine=0.99999, exclude=["up"])
    assert isinstance(missed.value, CompressionRefused) and not missed.value.result.ok
    assert missed.value.result.outputs[0].failed == ("cosine",)


def test_every_builtin_tolerance_names_the_rates_it_relaxes() -> None:
    from gsrewrite.pipelines.compress import strategies, tolerance_of

    registry = strategies()
    for name in ("fp16", "bf16", "dynamic-int8", "static-int8", "int8", "int4"):
        tolerance = tolerance_of(registry.get(name))
        assert 0.9 <= tolerance.min_agreement < 1.0 and tolerance.min_top1 is not None, name
    assert tolerance_of(registry.get("int8"), min_agreement=0.5).min_agreement == 0.5


def test_int4_quantizes_a_tied_lm_head_read_through_a_transpose() -> None:
    """``logits = h @ W^T`` with W stored [vocab, hidden] (a tied LM head, half a decoder's weight bytes): the
    MatMul reads W itself as MatMulNBits keeps it ([N, K]); the Transpose goes."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((256, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["h", "wt"], ["y"])],
        "lm_head", [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])], [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    result = gsrewrite.compress(model, "int4", min_top1=0.0)
    ops = [n.op_type for n in result.model.graph.node]
    assert ops == ["MatMulNBits"], ops
    x = rng.standard_normal((3, 64)).astype(np.float32)
    got = ort.InferenceSession(result.model.SerializeToString()).run(None, {"h": x})[0]
    expected = x @ weight.T
    cosine = float((got * expected).sum() / np.linalg.norm(got) / np.linalg.norm(expected))
    assert cosine > 0.99


def _tied(hidden: int = 64, vocab: int = 300) -> onnx.ModelProto:
    """ids -> Gather(table) -> MatMul -> logits through the tied table (Transpose + MatMul), embedding as output."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal((vocab, hidden)).astype(np.float32)
    w = (rng.standard_normal((hidden, hidden)) / 8).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
         helper.make_node("MatMul", ["e", "w"], ["h"], name="mlp"),
         helper.make_node("Transpose", ["table"], ["tt"], perm=[1, 0], name="tie"),
         helper.make_node("MatMul", ["h", "tt"], ["logits"], name="lm_head")], "tied",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize(("symmetric", "head_bits"), [(True, 4), (False, 4), (False, 8)])
def test_a_tied_table_is_quantized_once_for_the_head_and_the_gather(symmetric: bool, head_bits: int) -> None:
    """The Gather reads the head's codes, scales and zero points through GatherBlockQuantized; its rows are the
    head's dequantized weight rows, exactly; head_bits 8 puts both at 8 bits, the other weights staying at 4."""
    model = _tied()
    table = numpy_helper.to_array(model.graph.initializer[0])
    result = gsrewrite.compress(model, "int4", symmetric=symmetric, head_bits=head_bits, min_elements=1,
                                min_top1=0.0)
    nodes = {n.op_type: n for n in result.model.graph.node}
    gather, head = nodes["GatherBlockQuantized"], next(n for n in result.model.graph.node
                                                      if n.op_type == "MatMulNBits" and n.output[0] == "logits")
    bits = {n.name: next(a.i for a in n.attribute if a.name == "bits") for n in result.model.graph.node
            if n.op_type in ("MatMulNBits", "GatherBlockQuantized")}
    assert bits[gather.name] == bits[head.name] == head_bits and sorted(bits.values()).count(4) >= 1
    assert list(gather.input[2:]) == list(head.input[2:]) and len(gather.input) == (3 if symmetric else 4)
    assert not any(t.name == "table" for t in result.model.graph.initializer)
    assert any("quantized once" in note for note in result.notes), result.notes
    session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = np.arange(table.shape[0], dtype=np.int64)
    rows = session.run(["e"], {"ids": ids})[0]  # every row of the table through the Gather
    step = np.abs(table).max(axis=1, keepdims=True) / (7 if head_bits == 4 else 127)
    assert np.all(np.abs(rows - table) <= step + 1e-6)
    probe = helper.make_graph([helper.make_node("MatMulNBits", list(head.input), ["y"], domain="com.microsoft",
                                                **{a.name: helper.get_attribute_value(a) for a in head.attribute})],
                              "probe", [helper.make_tensor_value_info(head.input[0], TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [t for t in result.model.graph.initializer if t.name in head.input])
    alone = helper.make_model(probe, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    y = ort.InferenceSession(alone.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {head.input[0]: np.eye(64, dtype=np.float32)})[0]
    np.testing.assert_allclose(y.T, rows, rtol=1e-5, atol=1e-5)  # the head's weight is the Gather's table


def test_a_hidden_size_the_block_does_not_divide_keeps_the_copy_and_says_why() -> None:
    result = gsrewrite.compress(_tied(hidden=48), "int4", min_elements=1, min_top1=0.0, min_cosine=0.9)
    assert "GatherBlockQuantized" not in {n.op_type for n in result.model.graph.node}
    assert any("not a multiple of the block size" in note for note in result.notes), result.notes


def test_cli_passes_the_quantizer_options(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_tied(), model)
    done = CliRunner().invoke(main, ["compress", str(model), str(tmp_path / "q.onnx"), "-s", "int4", "--method",
                                     "rtn", "--symmetric", "--head-bits", "8", "--accuracy-level", "4",
                                     "--no-activations", "--bench-runs", "0", "--min-top1", "0", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["options"] == {"symmetric": True, "method": "rtn", "activations": False, "accuracy_level": 4,
                               "head_bits": "8"}
    nodes = onnx.load(tmp_path / "q.onnx").graph.node
    assert {a.i for n in nodes if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "accuracy_level"} \
        == {4}
    assert any("round to nearest" in note for note in data["notes"]), data["notes"]


@pytest.mark.parametrize(("options", "head_inputs", "body_inputs"), [
    ({}, 3, 3),  # int4's default: symmetric blocks everywhere, the tied head (and its table's Gather) too
    ({"symmetric": True}, 3, 3),
    ({"symmetric": False}, 4, 4),
    ({"head_symmetric": False}, 4, 3),  # zero points for the head and its table only
    ({"symmetric": False, "head_symmetric": True}, 3, 4),
])
def test_int4_zero_points_only_where_asked(options: dict, head_inputs: int, body_inputs: int) -> None:
    """MatMulNBits with zero points runs 1.27x slower with int8 activations (accuracy_level 4); on SmolLM2 the
    head's bought no KL (0.213 either way over 480 positions), so none by default; each part can ask for them."""
    result = gsrewrite.compress(_tied(), "int4", min_elements=1, min_top1=0.0, **options)
    matmuls = {n.output[0]: n for n in result.model.graph.node if n.op_type == "MatMulNBits"}
    gather = next(n for n in result.model.graph.node if n.op_type == "GatherBlockQuantized")
    assert len(matmuls["logits"].input) == head_inputs and len(gather.input) == head_inputs
    assert all(len(n.input) == body_inputs for name, n in matmuls.items() if name != "logits")
    assert result.ok
