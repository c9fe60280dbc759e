"""The one comparison (gsrewrite.validation: metrics, criteria, class_scores, report): NaN/inf patterns, label
agreement, top-1 of class scores, the criterion that names the failing metric, folding runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from gsrewrite.errors import UsageError
from gsrewrite.protocols import Tolerance
from gsrewrite.testing import model_from_text
from gsrewrite.validation import compare_output
from gsrewrite.validation.class_scores import ClassAxis, class_axes
from gsrewrite.validation.criteria import Criterion, percent
from gsrewrite.validation.report import describe_failures, merge_runs

COSINE = Criterion(min_cosine=0.99)


@pytest.mark.parametrize(("ref", "cand", "count"), [
    ([1.0, 2.0, 3.0], [1.0, np.inf, 3.0], 1),                 # inf where the original is finite
    ([1.0, 2.0, 3.0], [np.nan, np.nan, 3.0], 2),              # NaN where it is finite
    ([1.0, np.inf, 3.0], [1.0, 5.0, 3.0], 1),                 # finite where the original is inf
    ([1.0, np.inf, 3.0], [1.0, np.nan, 3.0], 1),              # NaN where it is inf
    ([1.0, np.inf, -np.inf], [1.0, -np.inf, np.inf], 2),      # the other infinity
], ids=["inf", "nan", "finite-for-inf", "nan-for-inf", "sign"])
def test_a_different_nan_inf_pattern_fails_whatever_the_tolerance(ref, cand, count) -> None:
    for rule in (COSINE, Criterion(min_cosine=-1.0, max_abs=1e30), Criterion(atol=1e30, rtol=1e30)):
        result = compare_output("y", 0, np.array(ref), np.array(cand), criterion=rule)
        assert result.nonfinite_mismatches == count and "non-finite" in result.failed and not result.ok
    cosine = compare_output("y", 0, np.array(ref), np.array(cand), criterion=COSINE)
    assert cosine.failed == ("non-finite",)  # the finite elements agree: cosine is not what failed
    assert cosine.cosine == pytest.approx(1.0) and cosine.max_abs == 0.0


def test_the_same_nan_inf_pattern_agrees_in_every_mode() -> None:
    ref = np.array([np.nan, 1.0, np.inf, -np.inf])
    for rule in (COSINE, Criterion()):
        result = compare_output("y", 0, ref, ref.copy(), criterion=rule)
        assert result.ok and result.nonfinite_mismatches == 0


def test_labels_are_judged_by_their_agreement_rate() -> None:
    ref = np.arange(1000) % 7
    cand = ref.copy()
    cand[:5] += 1  # 99.5% agree
    exact = compare_output("label", 0, ref, cand)
    assert exact.exact and exact.agreement == pytest.approx(0.995) and exact.failed == ("agreement",)
    assert exact.cosine is None  # the cosine of class numbers means nothing
    assert compare_output("label", 0, ref, cand, criterion=Criterion(min_agreement=0.99)).ok
    assert compare_output("label", 0, ref, cand, criterion=Criterion(min_cosine=0.5, min_agreement=0.999)).failed \
        == ("agreement",)
    flags = compare_output("flag", 0, np.array([True, False]), np.array([True, True]))
    assert flags.agreement == 0.5 and not flags.ok


def test_class_scores_report_top1_beside_cosine() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((200, 10))
    cand = ref.copy()
    cand[:20] = cand[:20, ::-1]  # 20 rows: the classes reversed, so their top class changes
    result = compare_output("logits", 0, ref, cand, criterion=Criterion(min_cosine=-1.0, min_top1=0.95),
                            class_axis=ClassAxis(-1))
    assert (result.class_axis, result.top1_rows, result.top1_agree) == (1, 200, 180)
    assert result.top1 == pytest.approx(0.9) and result.failed == ("top-1",)
    unjudged = compare_output("logits", 0, ref, cand, criterion=Criterion(min_cosine=-1.0), class_axis=ClassAxis(-1))
    assert unjudged.ok and unjudged.top1 == pytest.approx(0.9)  # reported, not judged without min_top1
    axis0 = compare_output("s", 0, ref.T, cand.T, class_axis=ClassAxis(0))
    assert (axis0.class_axis, axis0.top1_rows, axis0.top1_agree) == (0, 200, 180)


def test_a_tie_in_the_original_accepts_either_class_and_odd_shapes_get_no_top1() -> None:
    tie = compare_output("s", 0, np.array([[1.0, 1.0, 0.0]]), np.array([[0.9, 1.0, 0.0]]), class_axis=ClassAxis(-1))
    assert (tie.top1_rows, tie.top1_agree) == (1, 1)
    one_class = compare_output("s", 0, np.ones((4, 1)), np.ones((4, 1)), class_axis=ClassAxis(-1))
    three_d = compare_output("s", 0, np.ones((2, 3, 4)), np.ones((2, 3, 4)), class_axis=ClassAxis(-1, rank=2))
    assert one_class.top1_rows == 0 and three_d.top1_rows == 0


def _axes(text: str) -> dict[str, ClassAxis]:
    weights = {"w": np.ones((4, 3), np.float32), "b": np.ones(3, np.float32)}
    return class_axes(model_from_text(text, initializers={k: v for k, v in weights.items() if k in text}))


def test_which_outputs_hold_class_scores() -> None:
    assert _axes("g (float[N, 4] x) => (float[N, 4] s, int64[N] k) { s = Relu (x)\n k = ArgMax <axis = 1> (s) }") \
        == {"s": ClassAxis(1)}
    topk = "{ s = Relu (x)\n k = Constant <value = int64[1] {2}> ()\n v, i = TopK (s, k) }"
    assert _axes(f"g (float[N, 4] x) => (float[N, 4] s, float[N, 2] v, int64[N, 2] i) {topk}") == {"s": ClassAxis(-1)}
    assert _axes("g (float[N, 4] x) => (float[N, 4] p) { p = Softmax <axis = 1> (x) }") == {"p": ClassAxis(1)}
    assert _axes("g (float[N, S, 4] x) => (float[N, S, 4] logits) { logits = Relu (x) }") == {"logits": ClassAxis(-1)}
    assert _axes("g (float[N, 4] x) => (float[N, 3] y) { h = MatMul (x, w)\n y = Add (h, b) }") \
        == {"y": ClassAxis(-1, rank=2)}
    assert _axes("g (float[N, 4] x) => (float[N, 3] y) { h = MatMul (x, w)\n y = Tanh (h) }") == {}  # a pooler
    assert _axes("g (float[N, 4] x) => (float[N, 4] y) { y = Relu (x) }") == {}


def test_the_criterion_describes_itself_and_names_each_failure() -> None:
    assert Criterion().describe() == "atol=0.0001, rtol=0.001"
    rule = Criterion.of(Tolerance(min_cosine=0.99, min_agreement=0.99, min_top1=0.98))
    assert rule.describe() == "cosine >= 0.99, agreement >= 99%, top-1 >= 98%"
    bad = compare_output("y", 0, np.array([1.0, 0.0]), np.array([0.0, 1.0]), criterion=Criterion(min_cosine=0.9,
                                                                                                    max_abs=0.5))
    assert bad.failed == ("cosine", "max abs")
    assert describe_failures(bad, Criterion(min_cosine=0.9, max_abs=0.5)) == \
        "y: cosine 0.000000, need >= 0.9; max abs 1, need <= 0.5"
    label = compare_output("label", 0, np.arange(5), np.array([0, 1, 2, 3, 0]), criterion=rule)
    assert describe_failures(label, rule) == "label: 80% agree (4 of 5), need >= 99%"
    assert [percent(r) for r in (0.99, 0.996, 1 / 3, 0.99999999, 1.0)] == ["99%", "99.6%", "33.333%", "99.999%",
                                                                             "100%"]


@pytest.mark.parametrize("values", [{"min_agreement": 1.5}, {"min_top1": -0.1}, {"min_cosine": float("nan")},
                                    {"max_abs": -1.0}, {"atol": float("nan")}])
def test_bad_criterion_values_are_usage_errors(values) -> None:
    with pytest.raises(UsageError):
        Criterion(**values).check()


def test_rates_are_judged_over_every_run_together() -> None:
    """Three one-row runs, one label changed: each run is 0% or 100%; together 2 of 3 agree."""
    rule = Criterion(min_agreement=0.6)
    runs = [compare_output("label", r, np.array([3]), np.array([3 if r else 4]), criterion=rule) for r in range(3)]
    assert [r.ok for r in runs] == [False, True, True]
    folded = merge_runs(runs, rule)
    assert folded.agreement == pytest.approx(2 / 3) and folded.ok
    assert not merge_runs(runs, Criterion(min_agreement=0.7)).ok


def test_validate_judges_a_compressed_classifier_like_compress(tmp_path) -> None:
    """validate() with a tolerance's values gives the verdict compress gives: labels and class scores included."""
    from gsrewrite.validation import validate

    rng = np.random.default_rng(0)
    w = (1.0 + 0.01 * rng.standard_normal((8, 5))).astype(np.float32)

    def model(weight: np.ndarray) -> onnx.ModelProto:
        return model_from_text("g (float[64, 8] x) => (float[64, 5] logits, int64[64] label) "
                               "{ logits = MatMul (x, w)\n label = ArgMax <axis = -1, keepdims = 0> (logits) }",
                               initializers={"w": weight})
    near = w + (0.02 * rng.standard_normal(w.shape)).astype(np.float32)
    report = validate(model(w), model(near), min_cosine=0.99)
    label, logits = {o.name: o for o in report.outputs}["label"], {o.name: o for o in report.outputs}["logits"]
    assert logits.ok and logits.cosine > 0.99 and logits.top1 == label.agreement < 0.9
    assert label.failed == ("agreement",) and "label: " in report.summary() and "agree (" in report.summary()
    relaxed = validate(model(w), model(near), min_cosine=0.99, min_agreement=0.0, min_top1=0.99)
    assert [o.failed for o in relaxed.outputs] == [("top-1",), ()]
    assert validate(model(w), model(near), min_cosine=0.99, min_agreement=0.0).ok
