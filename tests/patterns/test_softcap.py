"""gqa-past-softcap: Gemma2's attention soft-cap, cap * tanh(s / cap) on the scaled scores before the mask,
becomes GroupQueryAttention's ``softcap`` under the batch1-chunks contract (MultiHeadAttention has none: without
the contract the block stays unfused, the pattern skipped with the reason)."""

from __future__ import annotations

import numpy as np
import onnx

from gsrewrite.pipelines import RewriteOptions, ValidationOptions
from gsrewrite.pipelines.apply import Fusions, apply_fusions
from gsrewrite.testing import model_from_text, op_counts

H, KV, S, P, DH = 4, 2, 3, 5, 8
RNG = np.random.default_rng(3)


def _model(cap: float = 2.0, cap2: float | None = None) -> onnx.ModelProto:
    text = f"""
    agraph (float[1, {H}, {S}, {DH}] q4, float[1, {KV}, {S}, {DH}] kk, float[1, {KV}, {S}, {DH}] vv,
            float[1, {KV}, {P}, {DH}] past_k, float[1, {KV}, {P}, {DH}] past_v, float[1, 1, {S}, {P + S}] bias)
            => (float[1, {S}, {H * DH}] out, float[1, {KV}, {P + S}, {DH}] present_k,
                float[1, {KV}, {P + S}, {DH}] present_v) {{
      present_k = Concat <axis = 2> (past_k, kk)
      ku = Unsqueeze (present_k, two)
      k5 = Expand (ku, e5)
      k4 = Reshape (k5, r4)
      kt = Transpose <perm = [0, 1, 3, 2]> (k4)
      present_v = Concat <axis = 2> (past_v, vv)
      vu = Unsqueeze (present_v, two)
      v5 = Expand (vu, e5)
      v4 = Reshape (v5, r4)
      m = MatMul (q4, kt)
      s = Mul (m, c)
      t = Div (s, cap)
      th = Tanh (t)
      sc = Mul (th, cap2)
      sm = Add (sc, bias)
      p = Softmax <axis = -1> (sm)
      ctx = MatMul (p, v4)
      ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
      out = Reshape (ct, so)
    }}"""
    consts = {"two": np.array([2], np.int64), "e5": np.array([1, KV, H // KV, P + S, DH], np.int64),
              "r4": np.array([1, H, P + S, DH], np.int64), "c": np.array(DH ** -0.5, np.float32),
              "cap": np.array(cap, np.float32), "cap2": np.array(cap if cap2 is None else cap2, np.float32),
              "so": np.array([1, S, H * DH], np.int64)}
    return model_from_text(text, initializers=consts)


def _inputs() -> dict[str, np.ndarray]:
    big = {n: (RNG.standard_normal(shape) * 3).astype(np.float32) for n, shape in
           (("q4", (1, H, S, DH)), ("kk", (1, KV, S, DH)), ("vv", (1, KV, S, DH)), ("past_k", (1, KV, P, DH)),
            ("past_v", (1, KV, P, DH)))}
    causal = np.where(np.arange(P + S)[None, :] <= P + np.arange(S)[:, None], 0.0, -1e4).astype(np.float32)
    return {**big, "bias": causal[None, None]}


def _apply(model: onnx.ModelProto, contracts: tuple[str, ...]) -> object:
    fusions = Fusions(("gqa-past-softcap",), "ort", "cpu", RewriteOptions(explain=True, contracts=contracts))
    return apply_fusions(model, fusions, ValidationOptions(inputs=_inputs()))


def test_the_soft_cap_becomes_group_query_attention_softcap() -> None:
    result = _apply(_model(), ("batch1-chunks",))
    assert result.counts == {"gqa-past-softcap": 1} and not result.dropped, (result.counts, result.dropped)
    assert result.validation.ok  # scores of about 9 capped at 2: a missing cap would be far off
    node = next(n for n in result.model.graph.node if n.op_type == "GroupQueryAttention")
    assert next(a.f for a in node.attribute if a.name == "softcap") == 2.0
    assert "Tanh" not in op_counts(result.model)


def test_without_the_contract_the_block_stays_unfused_with_the_reason() -> None:
    result = _apply(_model(), ())
    assert not result.changed
    assert result.verdicts()["gqa-past-softcap"].startswith("skipped: narrows the inputs the model accepts")


def test_two_different_constants_are_not_a_soft_cap() -> None:
    result = _apply(_model(cap=2.0, cap2=3.0), ("batch1-chunks",))
    assert not result.changed
    assert "not a soft-cap" in result.near_misses["gqa-past-softcap"].reason
