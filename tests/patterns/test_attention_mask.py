"""attention-mask-index: an exporter's padding bias (any spelling) -> the raw 2-D mask as Attention's mask_index."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

D, HEADS = 8, 2
PATTERN = ["attention-mask-index"]


ATTENTION = f"y = com.microsoft.Attention <num_heads = {HEADS}> (x, w, b, , , bias)"


def _model(bias_nodes: str, extra_inputs: str = "", attention: str = ATTENTION,
           constants: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """x [B, S, 8] -> com.microsoft.Attention(x, w, b, , , bias); ``bias_nodes`` compute ``bias`` from ``mask``."""
    rng = np.random.default_rng(0)
    text = f"""
    agraph (float[batch, seq, {D}] x, int64[batch, seq] mask{extra_inputs}) => (float[batch, seq, {D}] y) {{
      {bias_nodes}
      {attention}
    }}
    """
    return model_from_text(text, extra_opsets={"com.microsoft": 1}, initializers={
        "w": rng.standard_normal((D, 3 * D)).astype(np.float32),
        "b": rng.standard_normal(3 * D).astype(np.float32),
        "one": np.array(1.0, np.float32), "big": np.array(-10000.0, np.float32),
        "lowest": np.array(np.finfo(np.float32).min, np.float32), "zero": np.array(0.0, np.float32),
        "zero_i": np.array(0, np.int64), "ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64),
        "ax12": np.array([1, 2], np.int64), "minus_one": np.array(-1.0, np.float32),
        "zero_1": np.array([0], np.int64), "one_i": np.array(1, np.int64),
        "causal": np.triu(np.full((5, 5), -10000.0, np.float32), 1), **(constants or {}),
    })


# HF BERT: (1 - mask[:, None, None, :]) * -10000, expanded over the query rows (onnxruntime's Attention wants
# attention_bias [batch or 1, heads or 1, sequence, sequence])
LEGACY = """
      m1 = Unsqueeze (mask, ax1)
      m2 = Unsqueeze (m1, ax2)
      mf = Cast <to = 1> (m2)
      inv = Sub (one, mf)
      small = Mul (inv, big)
      sm = Shape (mask)
      rows = Slice (sm, ax1, ax2)
      tgt = Concat <axis = 0> (ax1, ax1, rows, ax1)
      bias = Expand (small, tgt)
"""

def test_legacy_bias_becomes_mask_index() -> None:
    result = assert_rewrite(_model(LEGACY), PATTERN, {"attention-mask-index": 1},
                            produces={"com.microsoft.Attention": 1, "Cast": 1}, absent=["Sub", "Mul", "Unsqueeze"])
    attention = next(n for n in result.model.graph.node if n.op_type == "Attention")
    assert len(attention.input) == 4 and attention.input[3]  # mask_index, no attention_bias
    filter_value = next(a.f for a in attention.attribute if a.name == "mask_filter_value")
    assert filter_value == -10000.0
    assert next(a.i for a in attention.attribute if a.name == "num_heads") == HEADS  # inherited


def test_where_expand_bias_with_lowest_float() -> None:
    where = """
      eq = Equal (mask, zero_i)
      e4 = Unsqueeze (eq, ax12)
      s = Shape (mask)
      n = Slice (s, ax1, ax2)
      bsz = Slice (s, zero_1, ax1)
      full = Concat <axis = 0> (bsz, ax1, n, n)
      ex = Expand (e4, full)
      bias = Where (ex, lowest, zero)
    """
    model = _model(where)
    # a fully padded row (its attention is uniform over the keys with float32's lowest value) agrees too
    rng = np.random.default_rng(4)
    inputs = {"x": rng.standard_normal((2, 6, D)).astype(np.float32),
              "mask": np.array([[1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], np.int64)}
    result = assert_rewrite(model, PATTERN, {"attention-mask-index": 1}, produces={"com.microsoft.Attention": 1},
                            absent=["Where", "Expand"], inputs=inputs, atol=1e-6, rtol=1e-6)
    attention = next(n for n in result.model.graph.node if n.op_type == "Attention")
    # onnxruntime gets -1e20 for it: the same weights for every row (scores vanish into either), and faster
    assert next(a.f for a in attention.attribute if a.name == "mask_filter_value") == pytest.approx(-1e20)


def test_bias_reading_another_inputs_shape_only() -> None:
    # the query-row count comes from x's shape: x is only a shape here, the bias still depends on the mask alone
    model = _model(LEGACY.replace("sm = Shape (mask)", "sm = Shape (x)"))
    assert_rewrite(model, PATTERN, {"attention-mask-index": 1}, absent=["Expand", "Shape"])


@pytest.mark.parametrize(("nodes", "reason"), [
    # a causal term added: the bias differs between query rows
    (LEGACY.replace("bias = Expand (small, tgt)", "pad = Expand (small, tgt)\n      bias = Add (pad, causal)"),
     "not 0 where the mask is 1"),
    # masked positions get -1: not a padding bias (softmax still sees them)
    (LEGACY.replace("small = Mul (inv, big)", "small = Mul (inv, minus_one)"), "very negative"),
    # two graph inputs decide the bias
    (LEGACY.replace("mf = Cast <to = 1> (m2)", "m3 = Mul (m2, mask2)\n      mf = Cast <to = 1> (m3)"),
     "2 graph inputs"),
])
def test_not_a_padding_bias(nodes: str, reason: str) -> None:
    model = _model(nodes, ", int64[batch, seq] mask2" if "mask2" in nodes else "")
    if "causal" in nodes:  # fixed sequence length 5 for the causal term
        for value in (*model.graph.input, *model.graph.output):
            value.type.tensor_type.shape.dim[1].dim_value = 5
    result = assert_no_rewrite(model, PATTERN)
    assert reason in result.near_misses["attention-mask-index"].reason


def test_mask_index_result_runs_with_padding() -> None:
    # explicit inputs: one row fully visible, one padded at the end (the case tokenizers produce)
    model = _model(LEGACY)
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((2, 6, D)).astype(np.float32),
              "mask": np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], np.int64)}
    assert_rewrite(model, PATTERN, {"attention-mask-index": 1}, inputs=inputs, atol=1e-5)


def test_two_attentions_share_one_cast_of_the_mask() -> None:
    # each match casts the mask on its own; the rewrite pass merges the identical Casts it added
    model = _model(LEGACY, attention=f"""
      h = com.microsoft.Attention <num_heads = {HEADS}> (x, w, b, , , bias)
      y = com.microsoft.Attention <num_heads = {HEADS}> (h, w, b, , , bias)""")
    result = assert_rewrite(model, PATTERN, {"attention-mask-index": 2}, produces={"com.microsoft.Attention": 2},
                            absent=["Sub", "Mul"])
    casts = [n for n in result.model.graph.node if n.op_type == "Cast"]
    assert len(casts) == 1
    readers = [n for n in result.model.graph.node if n.op_type == "Attention" and n.input[3] == casts[0].output[0]]
    assert len(readers) == 2


# GPT-2 (HF, legacy exporter): key <= query grid And the padding mask, Where(keep, 0, lowest)
CAUSAL = """
      sh = Shape (mask)
      n = Gather <axis = 0> (sh, one_i)
      r = Range (zero_i, n, one_i)
      rq = Unsqueeze (r, ax1)
      rk = Unsqueeze (r, zero_1)
      grid = LessOrEqual (rk, rq)
      pm = Cast <to = 9> (mask)
      p4 = Unsqueeze (pm, ax12)
      keep = And (grid, p4)
      bias = Where (keep, zero, lowest)
"""
BOTH = ["attention-mask-index", "attention-causal-mask-index"]


def test_causal_padding_bias_becomes_unidirectional_mask_index() -> None:
    rng = np.random.default_rng(2)
    inputs = {"x": rng.standard_normal((2, 6, D)).astype(np.float32),
              "mask": np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], np.int64)}
    result = assert_rewrite(_model(CAUSAL), BOTH, {"attention-causal-mask-index": 1}, inputs=inputs, atol=1e-5,
                            produces={"com.microsoft.Attention": 1, "Cast": 1}, absent=["Where", "And", "Range"])
    attention = next(n for n in result.model.graph.node if n.op_type == "Attention")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in attention.attribute}
    assert attrs["unidirectional"] == 1 and attrs["num_heads"] == HEADS
    assert attrs["mask_filter_value"] == np.finfo(np.float32).min  # what onnxruntime gives future keys
    assert len(attention.input) == 4 and attention.input[3]


def test_left_padded_causal_rows_with_no_visible_key_agree() -> None:
    # the first queries of a left-padded row see only padded keys: the original attends uniformly to every key
    # (all float32's lowest), and so does onnxruntime when padded keys get the same value as future ones
    rng = np.random.default_rng(7)
    inputs = {"x": rng.standard_normal((2, 6, D)).astype(np.float32),
              "mask": np.array([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]], np.int64)}
    assert_rewrite(_model(CAUSAL), BOTH, {"attention-causal-mask-index": 1}, inputs=inputs, atol=1e-5)


def test_causal_bias_masking_with_another_value_is_not_fused() -> None:
    # -10000 for padded and future keys: a left-padded row's first queries would attend differently
    result = assert_no_rewrite(_model(CAUSAL.replace("(keep, zero, lowest)", "(keep, zero, big)")), BOTH)
    assert "masks with -10000" in result.near_misses["attention-causal-mask-index"].reason


def test_future_keys_kept_is_not_causal() -> None:
    # key >= query: the mirror image of a causal mask
    model = _model(CAUSAL.replace("grid = LessOrEqual (rk, rq)", "grid = LessOrEqual (rq, rk)"))
    result = assert_no_rewrite(model, BOTH)
    assert "future" in result.near_misses["attention-causal-mask-index"].reason


MHA = f"y = com.microsoft.MultiHeadAttention <num_heads = {HEADS}> (x, x, x, , , bias)"
MHA_PATTERNS = ["mha-mask-index", "mha-causal-mask-index"]


@pytest.mark.parametrize(("bias", "pattern", "unidirectional"), [
    (LEGACY, "mha-mask-index", 0), (CAUSAL, "mha-causal-mask-index", 1),
])
def test_multi_head_attention_takes_the_raw_mask_as_key_padding_mask(bias: str, pattern: str,
                                                                     unidirectional: int) -> None:
    rng = np.random.default_rng(5)
    inputs = {"x": rng.standard_normal((2, 6, D)).astype(np.float32),
              "mask": np.array([[1, 1, 1, 1, 1, 1], [1, 0, 1, 1, 0, 0]], np.int64)}
    result = assert_rewrite(_model(bias, attention=MHA), MHA_PATTERNS, {pattern: 1}, inputs=inputs, atol=1e-5,
                            produces={"com.microsoft.MultiHeadAttention": 1, "Cast": 1}, absent=["Where", "Mul"])
    node = next(n for n in result.model.graph.node if n.op_type == "MultiHeadAttention")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs.get("unidirectional", 0) == unidirectional and attrs["num_heads"] == HEADS
    assert len(node.input) == 5 and node.input[4] and not node.input[3]  # key_padding_mask, no QKV bias


# GPT-2 as older transformers export it: the causal part sliced out of a registered [1, 1, P, P] tril buffer
SLICED_BUFFER = """
      sh = Shape (mask)
      n1 = Slice (sh, ax1, ax2)
      rows = Slice (tril, zero_1, n1, ax2)
      grid = Slice (rows, zero_1, n1, ax3)
      pm = Cast <to = 9> (mask)
      p4 = Unsqueeze (pm, ax12)
      keep = And (grid, p4)
      bias = Where (keep, zero, lowest)
"""


def _with_buffer(positions: int, window: int | None = None) -> onnx.ModelProto:
    keep = np.tril(np.ones((positions, positions), bool))
    if window is not None:  # a sliding window written into the buffer itself
        keep &= ~np.tril(np.ones((positions, positions), bool), -window)
    return _model(SLICED_BUFFER, constants={"tril": keep[None, None], "ax3": np.array([3], np.int64)})


def test_a_sliced_causal_buffer_is_proven_up_to_its_end() -> None:
    # beyond the buffer's 64 positions the model cannot run (the slice ends): those lengths prove nothing
    rng = np.random.default_rng(6)
    inputs = {"x": rng.standard_normal((2, 40, D)).astype(np.float32),
              "mask": (rng.uniform(size=(2, 40)) > 0.2).astype(np.int64)}
    inputs["mask"][:, 0] = 1
    assert_rewrite(_with_buffer(64), BOTH, {"attention-causal-mask-index": 1}, inputs=inputs, atol=1e-5)


def test_a_window_inside_the_buffer_is_found_past_the_sampled_length() -> None:
    # causal for the first 25 positions of each row, then a window: only lengths past 25 show it
    reason = assert_no_rewrite(_with_buffer(64, window=25), BOTH).near_misses["attention-causal-mask-index"].reason
    found = re.search(r"the key is not in the future \(batch \d+, sequence (\d+)\)", reason)
    assert found and int(found.group(1)) > 25, reason


def test_structural_constants_and_the_lengths_they_need() -> None:
    import onnx_graphsurgeon as gs
    from gsrewrite_patterns._shared.producers import NotProven, computation
    from gsrewrite_patterns._shared.sizes import proof_lengths, structural_constants, threshold_bound

    graph = gs.import_onnx(_model(LEGACY))
    bias = graph.tensors()["bias"]
    found = structural_constants(computation(graph, bias).nodes, bias)
    names = {c.name for c in found}
    assert "big" not in names and "one" in names  # the masked value only scales; 1 - mask is an offset
    assert threshold_bound(found) == 4.0  # Unsqueeze axis 2 and the Slice [1:2] of the shape; the rest is 1
    assert proof_lengths(20.0, None, "x") == [(7, 2), (22, 2), (33, 2), (43, 2), (130, 2), (7, 22), (7, 43)]
    assert proof_lengths(20.0, 4, "x")[0] == (7, 4)  # a static batch stays as declared
    assert (403, 1) in proof_lengths(200.0, None, "x")  # long lengths run with batch 1
    with pytest.raises(NotProven, match="8195 > 8192"):
        proof_lengths(4096.0, None, "the bias")
    with pytest.raises(NotProven, match="MB"):
        proof_lengths(3000.0, 8, "the bias")
