"""SDPA's NaN guard (Where(IsNaN(p), 0, p)) is absorbed by the attention fusions only for a provably finite mask.

A fully masked row (every score -inf) is 0 in the original (the guard) and NaN or uniform in the fused op: the
patterns must refuse masks that can hold -inf, and the fusions they still make must agree on every mask,
fully masked rows included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tomllib

from gsrewrite.pipelines import apply
from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

B, S, H, DH = 2, 4, 2, 4
D = H * DH
LOWEST = float(np.finfo(np.float32).min)
PATTERNS = Path(__file__).parents[2] / "patterns" / "mha" / "mha.toml"
#: the additive mask [B, 1, 1, S] from an int64 padding mask [B, S], as the exporters spell it
FROM_PADDING = "keep = Cast <to = 9> (attention_mask)\n u = Unsqueeze (keep, axes12)\n mask = Where (u, zero, filt)"


def attention(mask_text: str | None, mask_input: str, nan_guard: bool = True,
              filter_value: float = LOWEST, extra: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """Self-attention [B, S, D] -> [B, S, D] whose additive mask is computed by ``mask_text`` (None: the
    ``mask`` graph input itself) from ``mask_input``."""
    guard = "n = IsNaN (p)\n pg = Where (n, zero, p)" if nan_guard else "pg = Identity (p)"
    text = f"""
    attn (float[2, 4, 8] q_lin, float[2, 4, 8] k_lin, float[2, 4, 8] v_lin, {mask_input}) => (float[2, 4, 8] out) {{
        {mask_text or ""}
        q3 = Reshape (q_lin, shape4)
        q = Transpose <perm = [0, 2, 1, 3]> (q3)
        k3 = Reshape (k_lin, shape4)
        kt = Transpose <perm = [0, 2, 3, 1]> (k3)
        v3 = Reshape (v_lin, shape4)
        v = Transpose <perm = [0, 2, 1, 3]> (v3)
        m = MatMul (q, kt)
        s = Div (m, c)
        sm = Add (s, mask)
        p = Softmax <axis = -1> (sm)
        {guard}
        ctx = MatMul (pg, v)
        ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
        out = Reshape (ct, shape3)
    }}"""
    inits = {"shape4": np.array([B, S, H, DH], np.int64), "shape3": np.array([B, S, D], np.int64),
             "zero": np.array(0.0, np.float32), "c": np.array(np.sqrt(DH), np.float32),
             "axes12": np.array([1, 2], np.int64), "filt": np.array(filter_value, np.float32), **(extra or {})}
    return model_from_text(text, opset=17, initializers={k: v for k, v in inits.items() if k in text})


def padding_masks() -> dict[str, np.ndarray]:
    """[B, S] 0/1 masks: a fully masked row, left and right padding, no padding."""
    full = np.ones((B, S), np.int64)
    cases = {"none": full.copy(), "fully_masked_row": full.copy(), "left": full.copy(), "right": full.copy()}
    cases["fully_masked_row"][0] = 0
    cases["left"][1, :2] = 0
    cases["right"][0, 3:] = 0
    cases["right"][1, 1:] = 0
    return cases


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no fusion of the original
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _reasons(result: object) -> str:
    return " ".join(m.reason for m in result.near_misses.values())  # type: ignore[attr-defined]


def test_a_raw_float_mask_with_the_guard_is_refused_and_without_it_fuses():
    result = assert_no_rewrite(attention(None, "float[2, 1, 4, 4] mask"), ["mha"])
    assert "NaN guard" in _reasons(result)
    assert_rewrite(attention(None, "float[2, 1, 4, 4] mask", nan_guard=False), ["mha"], {"mha": 1})


def test_the_refused_case_would_differ_on_a_fully_masked_row():
    """What the refusal prevents: onnxruntime's MultiHeadAttention is not 0 on a row masked with -inf."""
    model = attention(None, "float[2, 1, 4, 4] mask")
    fused = apply(attention(None, "float[2, 1, 4, 4] mask", nan_guard=False), ["mha"], validate=False).model
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((B, S, D)).astype(np.float32) for n in ("q_lin", "k_lin", "v_lin")}
    feeds["mask"] = np.zeros((B, 1, S, S), np.float32)
    feeds["mask"][0, 0, 1, :] = -np.inf
    want = _session(model).run(None, feeds)[0]
    got = _session(fused).run(None, feeds)[0]
    assert np.all(want[0, 1] == 0)
    assert not np.allclose(got[0, 1], 0, atol=1e-4)


@pytest.mark.parametrize("filter_value", [-np.inf, float("nan")])
def test_a_mask_from_a_padding_mask_with_a_non_finite_filter_is_refused(filter_value):
    result = assert_no_rewrite(attention(FROM_PADDING, "int64[2, 4] attention_mask", filter_value=filter_value),
                               ["mha"])
    assert "non-finite" in _reasons(result)


def test_a_sum_of_two_finite_biases_is_refused():
    """lowest + lowest overflows to -inf: float arithmetic in the mask is not proven finite."""
    text = FROM_PADDING.replace("mask = Where", "half = Where") + "\n mask = Add (half, half)"
    result = assert_no_rewrite(attention(text, "int64[2, 4] attention_mask"), ["mha"])
    assert "Add" in _reasons(result)


def test_a_narrowing_cast_in_the_mask_is_refused():
    """float64 -1e300 is finite, float32 of it is -inf."""
    text = ("keep = Cast <to = 9> (attention_mask)\n u = Unsqueeze (keep, axes12)\n"
            "w = Where (u, zero64, big64)\n mask = Cast <to = 1> (w)")
    extra = {"zero64": np.array(0.0), "big64": np.array(-1e300)}
    result = assert_no_rewrite(attention(text, "int64[2, 4] attention_mask", extra=extra), ["mha"])
    assert "casts" in _reasons(result)


@pytest.mark.parametrize("case", sorted(padding_masks()))
def test_a_lowest_filter_padding_mask_fuses_and_agrees_on_every_mask(case):
    model = attention(FROM_PADDING, "int64[2, 4] attention_mask")
    fused = apply(model, ["mha"], validate=False)
    assert fused.counts.get("mha") == 1
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((B, S, D)).astype(np.float32) for n in ("q_lin", "k_lin", "v_lin")}
    feeds["attention_mask"] = padding_masks()[case]
    want = _session(model).run(None, feeds)[0]
    got = _session(fused.model).run(None, feeds)[0]
    assert not np.any(np.isnan(want))
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize(("value", "fuses"), [(LOWEST, True), (-np.inf, False)])
def test_a_constant_mask_is_checked_by_value(value, fuses):
    cmask = np.zeros((B, 1, S, S), np.float32)
    cmask[0, 0, 2, :] = value
    model = attention("mask = Identity (cmask)", "float[2, 4] unused", extra={"cmask": cmask})
    if fuses:
        assert apply(model, ["mha"], validate=False).counts.get("mha") == 1
    else:
        assert "non-finite" in _reasons(assert_no_rewrite(model, ["mha"]))


def test_every_pattern_absorbing_the_guard_checks_the_mask():
    patterns = tomllib.loads(PATTERNS.read_text())["pattern"]
    by_name = {p["name"]: p for p in patterns}
    guarded = [p for p in patterns if "alt.NanGuard" in p.get("match", by_name.get(p.get("base"), {}).get("match", ""))]
    assert len(guarded) >= 4
    for pattern in guarded:
        checks = pattern.get("checks", by_name.get(pattern.get("base"), {}).get("checks", []))
        assert "finite_mask" in checks, pattern["name"]
