"""The cached grouped-query attention family: gqa-past (lengths read off the bias, or each layer's own), the
per-token rotary ids (rotary-positions, -broadcast), rotary inside GroupQueryAttention (gqa-rotary, its own input
contract) and one packed QKV projection (gqa-packing); what must not fuse.

The block is LLaMA's as transformers exports it with a cache: Q/K/V projections split into heads, rotate-half
rotary from per-token tables computed from the position ids, the new K/V appended to the past, repeat_kv, scores
plus an additive bias over past + new tokens, softmax, context. Head size 16 (GroupQueryAttention's rotary needs a
multiple of 16), 4 Q heads over 2 KV heads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
import pytest

from gsrewrite.pipelines import RewriteOptions, ValidationOptions
from gsrewrite.pipelines.apply import Fusions, RewriteResult, apply_fusions
from gsrewrite.testing import model_from_text

HEADS, KV_HEADS, DH, HIDDEN = 4, 2, 16, 32
TOTAL = "past + seq"  # the bias's last dim: past + new tokens, as exporters declare it

REPEAT_KV = """
      {x}s = Shape ({x})
      {x}lead = Slice ({x}s, zero_1, two_1)
      {x}tail = Slice ({x}s, two_1, four_1)
      {x}et = Concat <axis = 0> ({x}lead, rep_1, {x}tail)
      {x}b = Slice ({x}s, zero_1, one_1)
      {x}rt = Concat <axis = 0> ({x}b, heads_1, {x}tail)
      {x}u = Unsqueeze ({x}, two_1)
      {x}5 = Expand ({x}u, {x}et)
      {x}4 = Reshape ({x}5, {x}rt)
"""
ROTATE_HALF = """
      {x}2 = Slice ({x}, half_1, big_1, minus_1)
      {x}n = Neg ({x}2)
      {x}1 = Slice ({x}, zero_1, half_1, minus_1)
      {x}r = Concat <axis = -1> ({x}n, {x}1)
      {x}c = Mul ({x}, cos)
      {x}s = Mul ({x}r, sin)
      {y} = Add ({x}c, {x}s)
"""


def _block(*, k_input: str = "x", table_batch: str = "batch", bias: bool = True, k_freqs: str = "inv_freq",
           head_size: int = DH, projection_bias: bool = False) -> onnx.ModelProto:
    """One cached attention block; ``k_input``: what K is projected from (``y``: another tensor than Q's);
    ``table_batch``: ``1`` for position ids [1, seq] broadcast over the batch; ``k_freqs``: K's own rotary
    frequencies (``half_freq``: other tables than Q's); ``projection_bias``: Qwen2's biased projections."""
    heads_dim = HEADS * head_size
    kv_dim = KV_HEADS * head_size
    bias_in = ", float[batch, 1, seq, total] bias" if bias else ""
    mask = "sm = Add (s, bias)" if bias else "sm = Identity (s)"
    k_rotary = ROTATE_HALF.format(x="kh", y="kk")
    if k_freqs != "inv_freq":  # K's own tables
        k_rotary = f"""kf = Mul (pf, {k_freqs})
      kemb = Concat <axis = -1> (kf, kf)
      kct = Cos (kemb)
      kst = Sin (kemb)
      kcos = Unsqueeze (kct, one_1)
      ksin = Unsqueeze (kst, one_1)
      """ + ROTATE_HALF.format(x="kh", y="kk").replace("cos)", "kcos)").replace("sin)", "ksin)")
    text = f"""
    agraph (float[batch, seq, {HIDDEN}] x, float[batch, seq, {HIDDEN}] y, int64[{table_batch}, seq] pids,
            float[batch, {KV_HEADS}, past, {head_size}] pastk,
            float[batch, {KV_HEADS}, past, {head_size}] pastv{bias_in})
         => (float[batch, seq, {heads_dim}] out, float[batch, {KV_HEADS}, total, {head_size}] presk,
             float[batch, {KV_HEADS}, total, {head_size}] presv) {{
      p3 = Unsqueeze (pids, minus_1)
      pf = Cast <to = 1> (p3)
      freqs = Mul (pf, inv_freq)
      emb = Concat <axis = -1> (freqs, freqs)
      ct = Cos (emb)
      st = Sin (emb)
      cos = Unsqueeze (ct, one_1)
      sin = Unsqueeze (st, one_1)
      qm = MatMul (x, wq)
      ql = {"Add" if projection_bias else "Identity"} (qm{", bq" if projection_bias else ""})
      q3 = Reshape (ql, qshape)
      qh = Transpose <perm = [0, 2, 1, 3]> (q3)
      {ROTATE_HALF.format(x="qh", y="q4")}
      km = MatMul ({k_input}, wk)
      kl = {"Add" if projection_bias else "Identity"} (km{", bk" if projection_bias else ""})
      k3 = Reshape (kl, kvshape)
      kh = Transpose <perm = [0, 2, 1, 3]> (k3)
      {k_rotary}
      vm = MatMul (x, wv)
      vl = {"Add" if projection_bias else "Identity"} (vm{", bv" if projection_bias else ""})
      v3 = Reshape (vl, kvshape)
      vv = Transpose <perm = [0, 2, 1, 3]> (v3)
      presk = Concat <axis = -2> (pastk, kk)
      presv = Concat <axis = -2> (pastv, vv)
      {REPEAT_KV.format(x="presk")}
      {REPEAT_KV.format(x="presv")}
      kt = Transpose <perm = [0, 1, 3, 2]> (presk4)
      m = MatMul (q4, kt)
      s = Mul (m, c)
      {mask}
      p = Softmax <axis = -1> (sm)
      ctx = MatMul (p, presv4)
      ct4 = Transpose <perm = [0, 2, 1, 3]> (ctx)
      out = Reshape (ct4, oshape)
    }}
    """
    rng = np.random.default_rng(0)
    model = model_from_text(text, initializers={
        "wq": rng.standard_normal((HIDDEN, heads_dim)).astype(np.float32) * 0.3,
        "wk": rng.standard_normal((HIDDEN, kv_dim)).astype(np.float32) * 0.3,
        "wv": rng.standard_normal((HIDDEN, kv_dim)).astype(np.float32) * 0.3,
        "qshape": np.array([0, 0, HEADS, head_size], np.int64),
        "kvshape": np.array([0, 0, KV_HEADS, head_size], np.int64),
        "oshape": np.array([0, 0, heads_dim], np.int64), "c": np.array(head_size ** -0.5, np.float32),
        "zero_1": np.array([0], np.int64), "one_1": np.array([1], np.int64), "two_1": np.array([2], np.int64),
        "four_1": np.array([4], np.int64), "rep_1": np.array([HEADS // KV_HEADS], np.int64),
        "heads_1": np.array([HEADS], np.int64), "minus_1": np.array([-1], np.int64),
        "half_1": np.array([head_size // 2], np.int64), "big_1": np.array([2**62], np.int64),
        "inv_freq": (1.0 / (10000 ** (np.arange(0, head_size, 2) / head_size))).astype(np.float32),
        "half_freq": (0.5 / (10000 ** (np.arange(0, head_size, 2) / head_size))).astype(np.float32),
        "bq": rng.standard_normal(heads_dim).astype(np.float32), "bk": rng.standard_normal(kv_dim).astype(np.float32),
        "bv": rng.standard_normal(kv_dim).astype(np.float32),
    })
    for value in [*model.graph.input, *model.graph.output]:  # the text syntax has no dim expressions
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param == "total":
                dim.dim_param = TOTAL
    return _renamed(model, NAMES)


#: the cache's names as optimum gives them (the text syntax has no dots in names): validation pairs them
NAMES = {"pastk": "past_key_values.0.key", "pastv": "past_key_values.0.value", "presk": "present.0.key",
         "presv": "present.0.value"}


def _renamed(model: onnx.ModelProto, names: dict[str, str]) -> onnx.ModelProto:
    for value in [*model.graph.input, *model.graph.output]:
        value.name = names.get(value.name, value.name)
    for node in model.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    return model


def _fuse(model: onnx.ModelProto, patterns: list[str], contracts: tuple[str, ...] = ("batch1-chunks",),
          validate: bool = True) -> RewriteResult:
    """``patterns`` under ``contracts``, validated (or not), with every pattern's near miss."""
    options = RewriteOptions(explain=True, contracts=contracts)
    return apply_fusions(model, Fusions(patterns, options=options), ValidationOptions() if validate else False)


def _ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def test_cached_attention_reads_its_lengths_off_the_bias() -> None:
    result = _fuse(_block(), ["gqa-past", "gqa-past-own-lengths"])
    assert {k: v for k, v in result.counts.items() if v} == {"gqa-past": 1}, result.near_misses
    assert not result.dropped and result.validation.ok
    gqa = next(n for n in result.model.graph.node if n.op_type == "GroupQueryAttention")
    producers = {o: n for n in result.model.graph.node for o in n.output}
    # total_sequence_length: Squeeze(Cast(Slice(Shape(bias))))
    shape = producers[producers[producers[producers[gqa.input[6]].input[0]].input[0]].input[0]]
    assert shape.op_type == "Shape" and shape.input[0] == "bias"


def test_cached_attention_without_a_bias_reads_each_layers_lengths() -> None:
    result = _fuse(_block(bias=False), ["gqa-past", "gqa-past-own-lengths"])
    assert {k: v for k, v in result.counts.items() if v} == {"gqa-past-own-lengths": 1}
    assert not result.dropped and result.validation.ok
    alone = _fuse(_block(bias=False), ["gqa-past"], validate=False)
    assert not alone.changed and "no bias" in alone.near_misses["gqa-past"].reason


def test_a_bias_of_another_length_is_not_read_for_the_lengths() -> None:
    model = _block()
    bias = next(i for i in model.graph.input if i.name == "bias")
    bias.type.tensor_type.shape.dim[3].dim_param = "window"  # not provably past + new tokens
    result = _fuse(model, ["gqa-past"], validate=False)
    assert not result.changed
    assert "past + new length" in result.near_misses["gqa-past"].reason


def test_per_token_rotary_ids_are_made_once_from_the_table() -> None:
    result = _fuse(_block(), ["rotary"])
    assert {k: v for k, v in result.counts.items() if v} == {"rotary-positions": 2}
    assert not result.dropped and result.validation.ok
    ops = _ops(result.model)
    assert ops["RotaryEmbedding"] == 2 and ops["Expand"] == 2 and ops["Range"] == 1, dict(ops)  # repeat_kv's 2


def test_per_token_rotary_ids_of_a_broadcast_table_are_expanded() -> None:
    result = _fuse(_block(table_batch="1"), ["rotary"])
    assert {k: v for k, v in result.counts.items() if v} == {"rotary-positions-broadcast": 2}
    assert not result.dropped and result.validation.ok
    assert _ops(result.model)["Expand"] == 4  # each rotary's ids broadcast to its x, and repeat_kv's 2
    alone = _fuse(_block(table_batch="1"), ["rotary-positions"], validate=False)
    assert not alone.changed and "not x's" in alone.near_misses["rotary-positions"].reason


ROTARY = ("gqa-past", "rotary", "gqa-rotary", "gqa-rotary-3d")
BOTH = ("batch1-chunks", "unpadded-prompts")


def test_rotary_moves_into_group_query_attention_over_the_projections() -> None:
    result = _fuse(_block(), list(ROTARY), contracts=BOTH)
    counts = {k: v for k, v in result.counts.items() if v}
    assert counts == {"gqa-past": 1, "rotary-positions": 2, "gqa-rotary": 1}, result.near_misses
    assert not result.dropped and result.validation.ok
    assert result.contracts == list(BOTH)
    ops = _ops(result.model)
    assert ops["RotaryEmbedding"] == 0 and ops["Transpose"] == 0, dict(ops)  # the projections feed the op
    gqa = next(n for n in result.model.graph.node if n.op_type == "GroupQueryAttention")
    assert {a.name: a.i for a in gqa.attribute if a.name == "do_rotary"} == {"do_rotary": 1}
    assert list(gqa.input[:3]) == ["qm", "km", "vm"]
    # validation tried the prompt at batch 1 only: the contract's inputs
    prefill = next(s for s in result.validation.sizes if s["name"] == "prefill")
    assert prefill["shapes"]["x"][0] == 1


@pytest.mark.parametrize("head_size", [DH, 8])
def test_rotary_stays_outside_without_the_contract_but_rotates_the_projections(head_size: int) -> None:
    result = _fuse(_block(head_size=head_size), list(ROTARY))
    counts = {k: v for k, v in result.counts.items() if v}
    assert counts == {"gqa-past": 1, "rotary-positions": 2, "gqa-rotary-3d": 1}, result.near_misses
    assert "unpadded-prompts" in result.skipped["gqa-rotary"] and result.contracts == ["batch1-chunks"]
    assert not result.dropped and result.validation.ok
    ops = _ops(result.model)
    assert ops["RotaryEmbedding"] == 2 and ops["Transpose"] == 0, dict(ops)
    rotary = [n for n in result.model.graph.node if n.op_type == "RotaryEmbedding"]
    assert sorted(a.i for n in rotary for a in n.attribute if a.name == "num_heads") == [KV_HEADS, HEADS]


@pytest.mark.parametrize(("block", "reason"), [
    (lambda: _block(head_size=8), "multiples of 16"),
    (lambda: _block(k_freqs="half_freq"), "different pos"),
])
def test_rotary_that_group_query_attention_cannot_take_stays_outside(block: Callable[[], onnx.ModelProto],
                                                                    reason: str) -> None:
    result = _fuse(block(), [*ROTARY[:3]], contracts=BOTH, validate=False)
    assert not result.counts.get("gqa-rotary")
    assert reason in result.near_misses["gqa-rotary"].reason, result.near_misses["gqa-rotary"].reason


PACKED = (*ROTARY, "gqa-packing", "gqa-packing-bias")  # gqa-rotary comes first where the contract allows it


def test_projections_of_one_input_are_packed_into_the_query() -> None:
    result = _fuse(_block(), list(PACKED), contracts=BOTH)
    counts = {k: v for k, v in result.counts.items() if v}
    assert counts == {"gqa-past": 1, "rotary-positions": 2, "gqa-rotary": 1, "gqa-packing": 1}, result.near_misses
    assert not result.dropped and result.validation.ok
    gqa = next(n for n in result.model.graph.node if n.op_type == "GroupQueryAttention")
    assert list(gqa.input[1:3]) == ["", ""] and _ops(result.model)["MatMul"] == 1
    weight = next(i for i in result.model.graph.initializer if list(i.dims) == [HIDDEN, (HEADS + 2 * KV_HEADS) * DH])
    assert weight is not None


def test_biased_projections_are_packed_with_their_biases() -> None:
    result = _fuse(_block(projection_bias=True), list(PACKED), contracts=BOTH)
    assert result.counts.get("gqa-packing-bias") == 1 and not result.dropped and result.validation.ok
    ops = _ops(result.model)
    assert ops["MatMul"] == 1 and ops["Add"] == 1, dict(ops)  # the packed bias


def test_projections_of_two_inputs_are_not_packed() -> None:
    result = _fuse(_block(k_input="y"), list(PACKED), contracts=BOTH, validate=False)
    assert result.counts.get("gqa-rotary") == 1 and not result.counts.get("gqa-packing")
    assert _ops(result.model)["MatMul"] == 3
