"""gsrewrite.validation: metrics, the pass/fail rule, input generation and loading, onnxruntime runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.errors import CannotValidateError, InputDataError, UsageError, ValidationError
from gsrewrite.validation import (
    compare_output,
    generate_inputs,
    large_models,
    model_inputs,
    plan_inputs,
    resolve_shapes,
    validate,
)
from gsrewrite.validation import runner as runner_module
from gsrewrite.validation.large_models import write_with_external_data

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def make_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # onnxruntime 1.31 reads IR <= 13; onnx 1.23 writes 14
    return model


def bias_model(bias: np.ndarray | None = None, dims=("batch", 8)) -> onnx.ModelProto:
    """y = x + b, with b = arange(8) unless given."""
    b = np.arange(8, dtype=np.float32) if bias is None else bias
    return make_model(
        [helper.make_node("Add", ["x", "b"], ["y"])],
        [helper.make_tensor_value_info("x", F, list(dims))],
        [helper.make_tensor_value_info("y", F, list(dims))],
        [numpy_helper.from_array(b, "b")],
    )


def perturbed_bias_model(index: int = 3, delta: float = 1e-2) -> onnx.ModelProto:
    bias = np.arange(8, dtype=np.float32)
    bias[index] += delta
    return bias_model(bias)


def embedding_model(rows: int = 100) -> onnx.ModelProto:
    """ids:int32[batch, seq] -> Cast -> Unsqueeze -> Reshape -> Gather(table[rows, 4]); mask:int64 -> Cast."""
    table = np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids64"], to=I64),
        helper.make_node("Unsqueeze", ["ids64", "axes"], ["ids3"]),
        helper.make_node("Reshape", ["ids3", "shape"], ["ids2"]),
        helper.make_node("Gather", ["table", "ids2"], ["emb"], axis=0),
        helper.make_node("Cast", ["mask"], ["maskf"], to=F),
        helper.make_node("Unsqueeze", ["maskf", "axes"], ["mask3"]),
        helper.make_node("Mul", ["emb", "mask3"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axes"),
        numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape"),
    ]
    inputs = [
        helper.make_tensor_value_info("ids", TensorProto.INT32, ["batch", "seq"]),
        helper.make_tensor_value_info("mask", I64, ["batch", "seq"]),
    ]
    return make_model(nodes, inputs, [helper.make_tensor_value_info("y", F, None)], inits)


# --- the pass/fail rule ------------------------------------------------------------------------------
def test_rule_is_polygraphy_elementwise_abs_or_rel():
    ref = np.array([1000.0, 1e-9, 1.0], dtype=np.float32)
    # 1000 + 0.5: abs 0.5 > atol but rel 5e-4 <= rtol -> passes; 1e-9 -> 3e-9: abs tiny -> passes;
    # 1.0 -> 1.01: abs 1e-2 > atol and rel 1e-2 > rtol -> fails
    cand = np.array([1000.5, 3e-9, 1.01], dtype=np.float32)
    result = compare_output("y", 0, ref, cand, atol=1e-4, rtol=1e-3)
    assert result.mismatches == 1
    assert result.max_abs == pytest.approx(0.5)
    assert result.max_rel == pytest.approx(2.0, rel=1e-3)  # |3e-9 - 1e-9| / 1e-9


def test_relative_error_divides_by_the_original():
    result = compare_output("y", 0, np.array([2.0]), np.array([3.0]), atol=0, rtol=0)
    assert result.max_rel == pytest.approx(0.5)


def test_nan_in_the_same_place_is_not_a_mismatch():
    ref = np.array([np.nan, 1.0, np.inf, -np.inf], dtype=np.float32)
    result = compare_output("y", 0, ref, ref.copy(), atol=1e-4, rtol=1e-3)
    assert result.ok
    assert (result.nan_original, result.nan_candidate, result.inf_original, result.inf_candidate) == (
        1,
        1,
        2,
        2,
    )
    assert result.max_abs == 0.0


@pytest.mark.parametrize(
    "cand",
    [[1.0, np.nan, 3.0], [np.nan, 2.0, np.nan], [1.0, 2.0, -np.inf]],
    ids=["nan-only-in-candidate", "nan-moved", "inf-sign"],
)
def test_non_finite_values_that_differ_are_mismatches(cand):
    ref = np.array([1.0, 2.0, np.inf if cand[2] == -np.inf else 3.0])
    result = compare_output("y", 0, ref, np.array(cand), atol=1e-4, rtol=1e-3)
    assert not result.ok
    assert result.mismatches >= 1


def test_integer_and_bool_outputs_are_compared_exactly():
    ints = compare_output("i", 0, np.array([1000, 5]), np.array([1001, 5]), atol=10.0, rtol=10.0)
    bools = compare_output("b", 0, np.array([True, False]), np.array([True, True]), atol=10.0, rtol=10.0)
    assert (ints.exact, ints.mismatches, ints.max_abs) == (True, 1, 1.0)
    assert (bools.exact, bools.mismatches) == (True, 1)


def test_shape_and_dtype_mismatch_are_problems():
    shape = compare_output("y", 0, np.zeros((2, 3)), np.zeros((3, 2)), atol=1, rtol=1)
    dtype = compare_output("y", 0, np.zeros(3, np.float32), np.zeros(3, np.float16), atol=1, rtol=1)
    assert shape.verdict == "shape [2, 3] vs [3, 2]" and shape.max_abs is None
    assert dtype.verdict == "dtype float32 vs float16" and dtype.max_abs == 0.0


def test_cosine_similarity():
    same_direction = compare_output("y", 0, np.array([1.0, 2.0]), np.array([2.0, 4.0]), atol=0, rtol=0)
    orthogonal = compare_output("y", 0, np.array([1.0, 0.0]), np.array([0.0, 1.0]), atol=0, rtol=0)
    zeros = compare_output("y", 0, np.zeros(3), np.zeros(3), atol=0, rtol=0)
    assert same_direction.cosine == pytest.approx(1.0)
    assert orthogonal.cosine == pytest.approx(0.0)
    assert zeros.cosine == 1.0


# --- validate() on models ----------------------------------------------------------------------------
def test_identical_models_agree():
    report = validate(bias_model(), bias_model(), runs=2)
    assert report.ok
    assert [o.name for o in report.outputs] == ["y"]
    # bias_model's batch is its only dynamic dim: the sample (batch 2) and the small set (batch 1)
    assert [(c.size_set, c.run) for c in report.per_run] == [("sample", 0), ("sample", 1), ("small", 0), ("small", 1)]
    assert [s["shapes"] for s in report.sizes] == [{"x": [2, 8]}, {"x": [1, 8]}]
    assert report.worst.max_abs == 0.0
    assert report.summary().startswith("OK: 1 output(s) agree over 2 runs at each of 2 input sizes")


def test_perturbed_weight_fails_with_the_right_error():
    report = validate(bias_model(), perturbed_bias_model(index=3, delta=1e-2))
    assert not report.ok
    worst = report.worst
    assert worst.name == "y" and worst.verdict == "mismatch"
    assert worst.max_abs == pytest.approx(1e-2, abs=1e-6)
    assert worst.mismatch_fraction == pytest.approx(1 / 8)  # one column of 8
    assert report.summary().startswith("MISMATCH: 1 of 1 output(s) disagree")


def test_perturbation_within_tolerance_passes():
    report = validate(bias_model(), perturbed_bias_model(delta=1e-5))
    assert report.ok
    assert report.worst.max_abs == pytest.approx(1e-5, abs=1e-6)


def test_nan_in_both_models_agrees_and_is_counted():
    def sqrt_model(op_before=None):
        nodes = [helper.make_node("Sqrt", ["x"], ["y"])]
        if op_before:
            nodes = [helper.make_node(op_before, ["x"], ["a"]), helper.make_node("Sqrt", ["a"], ["y"])]
        vi = helper.make_tensor_value_info
        return make_model(nodes, [vi("x", F, [64])], [vi("y", F, [64])])

    same = validate(sqrt_model(), sqrt_model())
    differs = validate(sqrt_model(), sqrt_model("Abs"))
    assert same.ok and same.outputs[0].nan_original > 0
    assert same.outputs[0].nan_original == same.outputs[0].nan_candidate
    assert not differs.ok and differs.outputs[0].nan_candidate == 0


def test_missing_output_in_candidate_fails():
    vi = helper.make_tensor_value_info
    two = make_model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])],
        [vi("x", F, [4])],
        [vi("y", F, [4]), vi("z", F, [4])],
    )
    one = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [4])], [vi("y", F, [4])])
    report = validate(two, one)
    assert not report.ok
    assert {o.name: o.verdict for o in report.outputs} == {"y": "ok", "z": "missing in candidate"}
    assert validate(one, two).extra_outputs == ["z"]


def test_different_input_names_are_an_input_error():
    vi = helper.make_tensor_value_info
    other = make_model([helper.make_node("Relu", ["x2"], ["y"])], [vi("x2", F, [4])], [vi("y", F, [4])])
    mine = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [4])], [vi("y", F, [4])])
    with pytest.raises(InputDataError, match="only in original: x; only in candidate: x2"):
        validate(mine, other)


def test_model_onnxruntime_cannot_load_names_the_model():
    broken = bias_model()
    broken.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(ValidationError, match="cannot load the candidate model") as info:
        validate(bias_model(), broken)
    assert "\n" not in str(info.value)


def test_background_validator_matches_the_foreground_one():
    from gsrewrite.validation.background import BackgroundValidator

    pending = BackgroundValidator(bias_model(), runs=2)
    validator = pending.get()
    assert validator is pending.get()  # prepared once
    assert validator.check(bias_model()).ok
    report = validator.check(perturbed_bias_model(index=3, delta=1e-2))
    assert not report.ok and report.worst.max_abs == pytest.approx(1e-2, abs=1e-6)


def test_background_validator_raises_in_the_callers_thread():
    from gsrewrite.validation.background import BackgroundValidator

    broken = bias_model()
    broken.graph.node[0].op_type = "NoSuchOp"
    pending = BackgroundValidator(broken)
    with pytest.raises(CannotValidateError, match=r"^cannot validate: .*NoSuchOp.*; --no-validate rewrites without"):
        pending.get()
    with pytest.raises(UsageError):
        BackgroundValidator(bias_model(), runs=0).get()


def test_path_arguments(tmp_path):
    onnx.save(bias_model(), tmp_path / "a.onnx")
    onnx.save(perturbed_bias_model(), tmp_path / "b.onnx")
    assert validate(tmp_path / "a.onnx", str(tmp_path / "a.onnx")).ok
    assert not validate(tmp_path / "a.onnx", tmp_path / "b.onnx").ok


def test_large_model_goes_through_a_temporary_file(monkeypatch):
    monkeypatch.setattr(runner_module, "MAX_PROTOBUF_BYTES", 10)
    monkeypatch.setattr(large_models, "EXTERNAL_THRESHOLD", 16)
    written = []

    def spy(model, folder):
        written.append(write_with_external_data(model, folder))
        assert (folder / "model.onnx.data").stat().st_size == 8 * 4
        return written[-1]

    monkeypatch.setattr(runner_module, "write_with_external_data", spy)
    model = perturbed_bias_model()
    before = model.SerializeToString()
    report = validate(bias_model(), model, noise_factor=0)  # no third session measuring the model's own noise
    assert len(written) == 2
    assert not written[0].exists()  # the temporary folder is gone
    assert report.worst.max_abs == pytest.approx(1e-2, abs=1e-6)
    assert model.SerializeToString() == before  # tensors moved out and back


def test_write_with_external_data_leaves_the_model_unchanged(tmp_path):
    model = bias_model(np.arange(512, dtype=np.float32), dims=(2, 512))
    before = model.SerializeToString()
    path = write_with_external_data(model, tmp_path, threshold=1024)
    assert model.SerializeToString() == before
    assert (tmp_path / "model.onnx.data").stat().st_size == 512 * 4
    written = onnx.load(path, load_external_data=False)
    assert written.graph.initializer[0].data_location == TensorProto.EXTERNAL


# --- generated inputs --------------------------------------------------------------------------------
def test_gather_indices_stay_within_the_table_and_run():
    model = embedding_model(rows=100)
    plans = {p.name: p for p in plan_inputs(model, model_inputs(model))}
    assert (plans["ids"].low, plans["ids"].high) == (0, 100)  # through Cast/Unsqueeze/Reshape
    assert (plans["mask"].low, plans["mask"].high) == (0, 2)
    report = validate(model, model, runs=3, input_shapes={"seq": 64})
    assert report.ok
    assert report.inputs["ids"]["values"] == "uniform integers in [0, 100)"


def test_attention_masks_never_mask_a_whole_row():
    # a row with every key masked has no defined attention: generated masks never have one
    model = embedding_model(rows=100)
    plans = {p.name: p for p in plan_inputs(model, model_inputs(model), {"batch": 8, "seq": 16})}
    assert plans["mask"].mask and not plans["ids"].mask
    for seed in range(3):
        mask = generate_inputs(list(plans.values()), seed)["mask"]
        assert mask.shape == (8, 16) and np.all(mask.sum(axis=1) >= 1)
        assert np.all(mask[1::4, 0] == 0) and np.all(mask[1::4, -1] == 1)  # rows of kind 1: left padding
        assert np.all(mask[2::4] == 1) and not np.all(mask[0::4] == 1)  # rows of kind 2: no padding


def test_out_of_range_indices_make_onnxruntime_fail():
    model = embedding_model(rows=100)
    feed = {"ids": np.array([[100]], dtype=np.int32), "mask": np.ones((1, 1), dtype=np.int64)}
    with pytest.raises(ValidationError, match="failed to run the original model"):
        validate(model, model, inputs=feed)


def test_generated_inputs_are_seeded_per_run():
    model = bias_model()
    plans = plan_inputs(model, model_inputs(model))
    assert np.array_equal(generate_inputs(plans, 5)["x"], generate_inputs(plans, 5)["x"])
    assert not np.array_equal(generate_inputs(plans, 5)["x"], generate_inputs(plans, 6)["x"])
    not_model = make_model(
        [helper.make_node("Not", ["m"], ["y"])],
        [_vi("m", TensorProto.BOOL, [64])],
        [_vi("y", TensorProto.BOOL, [64])],
    )
    drawn = generate_inputs(plan_inputs(not_model, model_inputs(not_model)), 0)["m"]
    assert drawn.dtype == np.bool_ and 0 < drawn.sum() < 64


def _vi(name, elem_type, dims):
    return helper.make_tensor_value_info(name, elem_type, dims)


def test_default_dims():
    model = make_model(
        [helper.make_node("Identity", ["a"], ["y"])],
        [_vi("a", F, ["batch", "sequence"]), _vi("b", F, [None, None, 3]), _vi("c", F, ["n"])],
        [_vi("y", F, None)],
    )
    assert resolve_shapes(model_inputs(model)) == {"a": (2, 16), "b": (2, 16, 3), "c": (16,)}


def test_input_shapes_bind_symbolic_dims_across_inputs():
    model = embedding_model()
    specs = model_inputs(model)
    assert resolve_shapes(specs, {"ids": (1, 128)}) == {"ids": (1, 128), "mask": (1, 128)}
    assert resolve_shapes(specs, {"batch": 3}) == {"ids": (3, 16), "mask": (3, 16)}
    with pytest.raises(InputDataError, match="given as both 3 and 1"):
        resolve_shapes(specs, {"batch": 3, "ids": (1, 128)})


def test_input_shapes_errors():
    specs = model_inputs(bias_model())
    with pytest.raises(InputDataError, match="contradicts its fixed dim 8"):
        resolve_shapes(specs, {"x": (2, 9)})
    with pytest.raises(InputDataError, match="wrong rank"):
        resolve_shapes(specs, {"x": (2,)})
    with pytest.raises(UsageError, match="'xx', which is not an input of the model"):
        resolve_shapes(specs, {"xx": (2, 8)})


# --- given inputs ------------------------------------------------------------------------------------
def test_npz_inputs_are_repeated_per_run(tmp_path):
    x = np.random.default_rng(1).standard_normal((3, 8))  # float64: converted to the model's float32
    np.savez(tmp_path / "in.npz", x=x)
    report = validate(bias_model(), perturbed_bias_model(), inputs=tmp_path / "in.npz", runs=2)
    assert report.inputs["x"] == {"shape": [3, 8], "dtype": "float32", "source": "given"}
    given = [c for c in report.per_run if c.size_set == "sample"]
    assert [c.run for c in given] == [0, 1]
    assert sum(c.mismatches for c in given) == 2 * 3  # column 3 of 3 rows, twice
    # the small set (batch 1) is generated: column 3 of its one row, twice
    assert report.outputs[0].mismatches == 2 * 3 + 2 and report.outputs[0].failed_sets == ("sample", "small")


def test_given_inputs_are_checked():
    model = embedding_model()
    mask = np.ones((1, 4), dtype=np.int64)
    with pytest.raises(InputDataError, match="missing input"):
        validate(model, model, inputs={"ids": np.zeros((1, 4), np.int32)})
    with pytest.raises(InputDataError, match="unknown input name"):
        validate(model, model, inputs={"ids": np.zeros((1, 4), np.int32), "mask": mask, "extra": mask})
    with pytest.raises(InputDataError, match="do not convert exactly"):
        validate(model, model, inputs={"ids": np.full((1, 4), 0.5), "mask": mask})
    with pytest.raises(InputDataError, match="contradicts"):
        validate(bias_model(), bias_model(), inputs={"x": np.zeros((1, 7), np.float32)})
    # int64 -> int32 and float 1.0 -> int64 convert when the values survive
    assert validate(model, model, inputs={"ids": np.ones((1, 4), np.int64), "mask": mask.astype(float)}).ok


def test_bad_npz_files(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"this is not a zip file")
    np.save(tmp_path / "single.npy", np.zeros(3))
    with pytest.raises(InputDataError, match="cannot read inputs"):
        validate(bias_model(), bias_model(), inputs=tmp_path / "bad.npz")
    with pytest.raises(InputDataError, match="single array"):
        validate(bias_model(), bias_model(), inputs=tmp_path / "single.npy")
    with pytest.raises(InputDataError, match="not found"):
        validate(bias_model(), bias_model(), inputs=tmp_path / "missing.npz")


def test_bad_options():
    with pytest.raises(UsageError):
        validate(bias_model(), bias_model(), runs=0)
    with pytest.raises(UsageError):
        validate(bias_model(), bias_model(), atol=float("nan"))
    with pytest.raises(UsageError, match="cannot be combined"):
        validate(bias_model(), bias_model(), inputs={"x": np.zeros((1, 8), np.float32)}, input_shapes={"batch": 1})


def test_report_to_dict():
    data = validate(bias_model(), perturbed_bias_model()).to_dict()
    assert data["ok"] is False
    assert data["outputs"][0]["max_abs"] == pytest.approx(1e-2, abs=1e-6)
    assert data["outputs"][0]["mismatch_fraction"] == pytest.approx(1 / 8)
    assert set(data["timings"]) == {"original", "candidate"}
    assert data["inputs"]["x"]["shape"] == [2, 8]


def test_sequence_outputs_are_compared_item_by_item():
    model = make_model(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["s"])],
        [_vi("x", F, [3])],
        [helper.make_tensor_sequence_value_info("s", F, [3])],
    )
    report = validate(model, model)
    assert report.ok
    assert [o.name for o in report.outputs] == ["s[0]", "s[1]"]


def test_run_failure_on_generated_inputs_names_them():
    fixed_batch = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [_vi("x", F, ["batch", 8])],
        [_vi("y", F, [1, 8])],
        [numpy_helper.from_array(np.array([1, 8], dtype=np.int64), "shape")],
    )
    with pytest.raises(ValidationError, match=r"original model: .*\(generated inputs: x float32\[2, 8\]"):
        validate(fixed_batch, fixed_batch)
    assert validate(fixed_batch, fixed_batch, input_shapes={"batch": 1}).ok


def test_dynamic_dims_grow_until_the_original_runs():
    # a 300-sample convolution (an audio feature extractor): the graph says 300 samples are the fewest it takes
    # (shapes/dim_minimums.py), so the generated inputs start there
    conv = make_model(
        [helper.make_node("Conv", ["x", "w"], ["y"], strides=[100])],
        [_vi("x", F, ["batch", 1, "samples"])],
        [_vi("y", F, ["batch", 1, None])],
        [numpy_helper.from_array(np.ones((1, 1, 300), np.float32), "w")],
    )
    report = validate(conv, conv)
    assert report.ok and report.inputs["x"]["shape"] == [2, 1, 300]
    # what the graph does not say (the first 300 samples, regrouped by 300): 16 and 256 samples are rejected,
    # 4096 are not
    window = make_model(
        [helper.make_node("Slice", ["x", "zero", "three_hundred", "two"], ["s"]),
         helper.make_node("Reshape", ["s", "rows"], ["y"])],
        [_vi("x", F, ["batch", 1, "samples"])],
        [_vi("y", F, [None, 300])],
        [numpy_helper.from_array(np.array([v], np.int64), n)
         for n, v in (("zero", 0), ("three_hundred", 300), ("two", 2))]
        + [numpy_helper.from_array(np.array([-1, 300], np.int64), "rows")],
    )
    report = validate(window, window)
    assert report.ok and report.inputs["x"]["shape"] == [2, 1, 4096]
    # a failure no size can fix still names the generated inputs
    with pytest.raises(ValidationError, match=r"generated inputs: x float32\[2, 1, 16\]"):
        validate(conv, conv, input_shapes={"samples": 16})


def test_rank0_bool_input_is_generated_as_an_array():
    from gsrewrite.testing import model_from_text

    model = model_from_text("""
    g (bool flag, float[2] x) => (float[2] y) {
        z = Neg (x)
        y = Where (flag, x, z)
    }""")
    report = validate(model, model)
    assert report.ok


def test_validation_sessions_prepack_only_4_bit_weights():
    """Validation sessions skip prepacking (2-3 runs do not repay it), except for a model with MatMulNBits, whose
    unpacked path is slow (int4 GPT-2 base: candidate validation 6.7 -> 2.2 s, peak RSS lower)."""
    from onnx import TensorProto, helper

    from gsrewrite.model_io.source import Source
    from gsrewrite.validation.runner import _validation_options

    def options(op: str, domain: str = "") -> object:
        node = helper.make_node(op, ["x", "w"], ["y"], domain=domain)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
        return _validation_options(Source(helper.make_model(graph), role="candidate"), True)

    def prepacking_disabled(so: object) -> bool:
        try:
            return so.get_session_config_entry("session.disable_prepacking") == "1"  # type: ignore[attr-defined]
        except Exception:  # not set: onnxruntime's default, prepacking on
            return False

    assert prepacking_disabled(options("MatMul"))
    assert not prepacking_disabled(options("MatMulNBits", "com.microsoft"))
