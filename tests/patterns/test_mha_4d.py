"""mha-4d: attention over Q/K/V that arrive already split into heads [B, H, S, dh] -> MultiHeadAttention."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

B, H, S, DH = 2, 4, 5, 8
RNG = np.random.default_rng(4)

# Q, K, V split into heads upstream (after rotary, say): K^T is a plain Transpose of the last two axes
ATTENTION = f"""
agraph (float[{B}, {H}, {S}, {DH}] q4, float[{B}, {H}, {S}, {DH}] k4, float[{B}, {H}, {S}, {DH}] v4,
        float[{B}, 1, {S}, {S}] bias) => (float[{B}, {S}, {H * DH}] out) {{
  kt = Transpose <perm = [0, 1, 3, 2]> (k4)
  m = MatMul (q4, kt)
  s = Div (m, c)
  sm = Add (s, bias)
  p = Softmax <axis = -1> (sm)
  ctx = MatMul (p, v4)
  ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
  out = Reshape (ct, so)
}}"""
CONSTS = {"c": np.array(np.sqrt(DH), np.float32), "so": np.array([B, S, H * DH], np.int64)}


def _inputs() -> dict[str, np.ndarray]:
    heads = {name: RNG.standard_normal((B, H, S, DH)).astype(np.float32) for name in ("q4", "k4", "v4")}
    bias = np.where(np.tril(np.ones((S, S))) > 0, 0.0, -1e4).astype(np.float32)
    return {**heads, "bias": np.broadcast_to(bias, (B, 1, S, S)).copy()}


def _attribute(node: onnx.NodeProto, name: str) -> onnx.AttributeProto:
    return next(a for a in node.attribute if a.name == name)


@pytest.mark.parametrize("masked", [True, False], ids=["additive-bias", "no-mask"])
def test_heads_inputs_become_multi_head_attention(masked: bool) -> None:
    text = ATTENTION if masked else ATTENTION.replace("sm = Add (s, bias)", "sm = Identity (s)")
    inputs = _inputs() if masked else {k: v for k, v in _inputs().items() if k != "bias"}
    if not masked:
        text = text.replace(f",\n        float[{B}, 1, {S}, {S}] bias", "")
    result = assert_rewrite(model_from_text(text, initializers=CONSTS), ["mha"], {"mha-4d": 1},
                            produces={"com.microsoft.MultiHeadAttention": 1},
                            absent=["Softmax", "MatMul", "Div"], inputs=inputs)
    node = next(n for n in result.model.graph.node if n.op_type == "MultiHeadAttention")
    assert _attribute(node, "num_heads").i == H
    assert _attribute(node, "scale").f == pytest.approx(1 / np.sqrt(DH))
    assert (len(node.input) > 5 and node.input[5] == "bias") == masked


def test_a_context_flattened_to_2d_is_not_rewritten() -> None:
    # the context reshaped to [B * S, H * dh]: MultiHeadAttention's output is 3-D
    text = ATTENTION.replace(f"float[{B}, {S}, {H * DH}] out", f"float[{B * S}, {H * DH}] out")
    model = model_from_text(text, initializers={**CONSTS, "so": np.array([B * S, H * DH], np.int64)})
    result = assert_no_rewrite(model, ["mha"])
    assert "rank 2" in result.near_misses["mha-4d"].reason
