"""mqa-4d: multi-query attention (Falcon), Q of several heads over one K/V head that the MatMuls broadcast.

Before, mha-4d read the K/V head count from Q and reshaped the one head into 4: onnxruntime refused the
candidate and validation dropped it. The head counts now come from the shapes: one KV head is repeated for
MultiHeadAttention (ort) or given as is to Attention-23 (onnx), and a match whose head counts do not follow from
the shapes is refused with the reason.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

B, H, S, DH = 2, 4, 5, 8
RNG = np.random.default_rng(7)

MQA = f"""
agraph (float[{B}, {H}, {S}, {DH}] q4, float[{B}, 1, {S}, {DH}] k4, float[{B}, 1, {S}, {DH}] v4,
        float[{B}, 1, {S}, {S}] bias) => (float[{B}, {S}, {H * DH}] out) {{
  kt = Transpose <perm = [0, 1, 3, 2]> (k4)
  m = MatMul (q4, kt)
  s = Mul (m, c)
  sm = Add (s, bias)
  p = Softmax <axis = -1> (sm)
  ctx = MatMul (p, v4)
  ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
  out = Reshape (ct, so)
}}"""
CONSTS = {"c": np.array(DH ** -0.5, np.float32), "so": np.array([0, 0, H * DH], np.int64)}


def _inputs(kv_heads: int = 1) -> dict[str, np.ndarray]:
    q = RNG.standard_normal((B, H, S, DH)).astype(np.float32)
    k, v = (RNG.standard_normal((B, kv_heads, S, DH)).astype(np.float32) for _ in range(2))
    bias = np.where(np.tril(np.ones((S, S))) > 0, 0.0, -1e4).astype(np.float32)
    return {"q4": q, "k4": k, "v4": v, "bias": np.broadcast_to(bias, (B, 1, S, S)).copy()}


def _attribute(node: onnx.NodeProto, name: str) -> onnx.AttributeProto:
    return next(a for a in node.attribute if a.name == name)


def test_one_kv_head_becomes_multi_head_attention_over_the_repeated_head() -> None:
    result = assert_rewrite(model_from_text(MQA, initializers=CONSTS), ["mha"], {"mqa-4d": 1},
                            produces={"com.microsoft.MultiHeadAttention": 1, "Expand": 2},
                            absent=["Softmax", "MatMul"], inputs=_inputs())
    node = next(n for n in result.model.graph.node if n.op_type == "MultiHeadAttention")
    assert _attribute(node, "num_heads").i == H
    repeats = {i.name: onnx.numpy_helper.to_array(i) for i in result.model.graph.initializer}
    expand = next(n for n in result.model.graph.node if n.op_type == "Expand")
    assert repeats[expand.input[1]].tolist() == [1, H, 1, 1]  # one KV head repeated, not reshaped into H


def test_the_onnx_target_gives_attention_23_the_one_kv_head() -> None:
    model = model_from_text(MQA, initializers=CONSTS, opset=23, ir_version=10)
    result = assert_rewrite(model, ["mha"], {"mqa-4d": 1}, target="onnx", produces={"Attention": 1},
                            absent=["Softmax", "Expand"], inputs=_inputs())
    node = next(n for n in result.model.graph.node if n.op_type == "Attention")
    assert node.input[1] == "k4" and node.input[2] == "v4"


def test_mha_4d_refuses_one_kv_head_with_the_reason() -> None:
    result = assert_no_rewrite(model_from_text(MQA, initializers=CONSTS), ["mha-4d"])
    assert "1 head for 4 Q heads: multi-query attention" in result.near_misses["mha-4d"].reason


@pytest.mark.parametrize("pattern", ["mha-4d", "mqa-4d"])
def test_a_kv_head_count_the_shapes_do_not_give_is_refused(pattern: str) -> None:
    # K/V heads symbolic: the MatMuls would broadcast 1 or match 4, nothing tells which
    text = MQA.replace(f"float[{B}, 1, {S}, {DH}] k4, float[{B}, 1, {S}, {DH}] v4",
                       f"float[{B}, kv, {S}, {DH}] k4, float[{B}, kv, {S}, {DH}] v4")
    result = assert_no_rewrite(model_from_text(text, initializers=CONSTS), [pattern])
    assert "do not follow from the shapes" in result.near_misses[pattern].reason


def test_q_heads_read_through_a_slice_of_a_fused_projection_are_not_guessed() -> None:
    # Falcon's fused QKV: [B, S, H + 2, dh] sliced into Q heads; the walk up from Q must not read H + 2 heads
    text = f"""
agraph (float[{B}, {S}, {(H + 2) * DH}] qkv, float[{B}, 1, {S}, {DH}] k4, float[{B}, 1, {S}, {DH}] v4)
        => (float[{B}, {S}, {H * DH}] out) {{
  r = Reshape (qkv, heads)
  qs = Slice (r, zero, h, two)
  q4 = Transpose <perm = [0, 2, 1, 3]> (qs)
  kt = Transpose <perm = [0, 1, 3, 2]> (k4)
  m = MatMul (q4, kt)
  s = Mul (m, c)
  p = Softmax <axis = -1> (s)
  ctx = MatMul (p, v4)
  ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
  out = Reshape (ct, so)
}}"""
    consts = {**CONSTS, "heads": np.array([B, S, H + 2, DH], np.int64), "zero": np.array([0], np.int64),
              "h": np.array([H], np.int64), "two": np.array([2], np.int64)}
    model = model_from_text(text, initializers=consts)
    inputs = {"qkv": RNG.standard_normal((B, S, (H + 2) * DH)).astype(np.float32),
              **{k: v for k, v in _inputs().items() if k in ("k4", "v4")}}
    result = assert_rewrite(model, ["mqa-4d"], {"mqa-4d": 1}, inputs=inputs)
    node = next(n for n in result.model.graph.node if n.op_type == "MultiHeadAttention")
    assert _attribute(node, "num_heads").i == H  # from Q's inferred shape, not the reshape's H + 2
