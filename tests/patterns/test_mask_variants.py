"""Masks that equal causal/padding at one length but not at others: never fused into plain causal/padding.

Sliding windows, band masks, prefix-LM masks and ALiBi biases, written the way GPT-2 (legacy: a Range grid;
dynamo: sizes from Shape, a GatherND of the mask) and BERT (padding) exports write their biases. Each model
is either left alone with the check's reason, or fused; a fused result is compared with the original by
onnxruntime here (not by the library's validation) at every length of :data:`LENGTHS`.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from gsrewrite_patterns.mha import attention_mask
from test_attention_mask import ATTENTION, CAUSAL, HEADS, LEGACY, D

from gsrewrite.pipelines import RewriteResult, apply
from gsrewrite.testing import model_from_text

LENGTHS = (7, 16, 33, 40, 130)
BOTH = ["attention-mask-index", "attention-causal-mask-index"]
MHA_BOTH = ["mha-mask-index", "mha-causal-mask-index"]
MHA = f"y = com.microsoft.MultiHeadAttention <num_heads = {HEADS}> (x, x, x, , , bias)"

# GPT-2 dynamo: batch and sequence from Shape slices of another input (x), the padding looked up by GatherND
DYNAMO = """
      s0 = Shape <start = 0, end = 1> (x)
      s1 = Shape <start = 1, end = 2> (x)
      bsz = Squeeze (s0)
      n = Squeeze (s1)
      r = Range (zero_i, n, one_i)
      br = Range (zero_i, bsz, one_i)
      rq = Unsqueeze (r, ax1)
      rk = Unsqueeze (r, zero_1)
      grid = LessOrEqual (rk, rq)
      tgt = Concat <axis = 0> (s0, ax1, ax1, s1)
      bi = Unsqueeze (br, ax123)
      bie = Expand (bi, tgt)
      ki = Unsqueeze (r, zero_12)
      kie = Expand (ki, tgt)
      bi5 = Unsqueeze (bie, minus_1)
      ki5 = Unsqueeze (kie, minus_1)
      idx = Concat <axis = -1> (bi5, ki5)
      pm = Cast <to = 9> (mask)
      p4 = GatherND (pm, idx)
      keep = And (grid, p4)
      bias = Where (keep, zero, lowest)
"""
EXTRA = {"ax123": np.array([1, 2, 3], np.int64), "zero_12": np.array([0, 1, 2], np.int64),
         "minus_1": np.array([-1], np.int64), "w20": np.array(20, np.int64), "w4096": np.array(4096, np.int64),
         "p10": np.array(10, np.int64), "slope": np.array(-0.5, np.float32), "f005": np.array(0.05, np.float32),
         "f1": np.array(1.0, np.float32), "two_i": np.array(2, np.int64)}

# key j hidden for query i when i - j >= w (Mistral's sliding window), spliced into the keep grid
WINDOW = """
      diff = Sub (rq, rk)
      near = Less (diff, {w})
      both = And (grid, near)
"""
# prefix-LM: the first 10 keys are visible to every query
PREFIX = """
      pre = Less (rk, p10)
      both = Or (grid, pre)
"""
# the window as a float threshold: (i - j) * 0.05 < 1
FLOAT_WINDOW = """
      diff = Sub (rq, rk)
      fd = Cast <to = 1> (diff)
      sd = Mul (fd, f005)
      near = Less (sd, f1)
      both = And (grid, near)
"""
# batch rows from 20 on get a window of 2 (a threshold on the batch index, not on the length)
LATE_ROWS = """
      diff = Sub (rq, rk)
      near = Less (diff, two_i)
      bq = Unsqueeze (br, ax123)
      early = Less (bq, w20)
      ok = Or (early, near)
      both = And (grid, ok)
"""
# the window is half the sequence length (a shape-derived window)
HALF_WINDOW = """
      diff = Sub (rq, rk)
      half = Div (n, two_i)
      near = Less (diff, half)
      both = And (grid, near)
"""


def _with_grid(base: str, splice: str) -> str:
    """``base`` with ``splice`` (which reads ``grid`` and writes ``both``) ANDed/ORed into the keep grid."""
    return base.replace("keep = And (grid,", splice + "\n      keep = And (both,")


def _variant(nodes: str, attention: str = ATTENTION, extra_inputs: str = "",
             constants: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """x [batch, seq, 8] -> ``attention`` reading ``bias``, which ``nodes`` compute from ``mask`` (as
    test_attention_mask's builder, with this file's constants and ``constants`` too)."""
    rng = np.random.default_rng(0)
    text = f"""
    agraph (float[batch, seq, {D}] x, int64[batch, seq] mask{extra_inputs}) => (float[batch, seq, {D}] y) {{
      {nodes}
      {attention}
    }}
    """
    values = {
        "w": rng.standard_normal((D, 3 * D)).astype(np.float32), "b": rng.standard_normal(3 * D).astype(np.float32),
        "one": np.array(1.0, np.float32), "big": np.array(-10000.0, np.float32),
        "lowest": np.array(np.finfo(np.float32).min, np.float32), "zero": np.array(0.0, np.float32),
        "zero_i": np.array(0, np.int64), "one_i": np.array(1, np.int64), "ax1": np.array([1], np.int64),
        "ax2": np.array([2], np.int64), "ax12": np.array([1, 2], np.int64), "zero_1": np.array([0], np.int64),
        **EXTRA, **(constants or {}),
    }
    return model_from_text(text, extra_opsets={"com.microsoft": 1}, initializers=values)


# BERT with a local band: keys 20 or more positions away (either side) are hidden, plus the padding
BAND = LEGACY.replace("bias = Expand (small, tgt)", """pad = Expand (small, tgt)
      n = Gather <axis = 0> (sm, one_i)
      r = Range (zero_i, n, one_i)
      rq = Unsqueeze (r, ax1)
      rk = Unsqueeze (r, zero_1)
      diff = Sub (rq, rk)
      dist = Abs (diff)
      far = GreaterOrEqual (dist, w20)
      bias = Where (far, big, pad)""")
# ALiBi: slope * (j - i) added to the scores, with the padding bias or on its own
ALIBI = """
      n = Gather <axis = 0> (sm, one_i)
      r = Range (zero_i, n, one_i)
      rq = Unsqueeze (r, ax1)
      rk = Unsqueeze (r, zero_1)
      rel = Sub (rk, rq)
      relf = Cast <to = 1> (rel)
      alibi = Mul (relf, slope)
"""
ALIBI_PADDED = LEGACY.replace("bias = Expand (small, tgt)", "pad = Expand (small, tgt)"
                              + ALIBI + "      bias = Add (pad, alibi)")
ALIBI_ONLY = "sm = Shape (x)" + ALIBI + "      a3 = Unsqueeze (alibi, zero_1)\n      bias = Unsqueeze (a3, zero_1)\n"


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _inputs(length: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((2, length), np.int64)
    mask[1, length - length // 3:] = 0  # right padding
    mask[0, : length // 4] = 0  # left padding: the first queries of a causal row see no unpadded key
    mask[0, length // 2::5] = 0  # holes
    return {"x": rng.standard_normal((2, length, D)).astype(np.float32), "mask": mask}


def _max_diffs(original: onnx.ModelProto, result: onnx.ModelProto) -> dict[int, float]:
    """Largest |original - result| per tested length (onnxruntime, both models on the same inputs)."""
    before, after = _session(original), _session(result)
    diffs = {}
    for length in LENGTHS:
        feeds = _inputs(length, length)
        wanted = {i.name for i in before.get_inputs()}
        a = before.run(None, {k: v for k, v in feeds.items() if k in wanted})[0]
        b = after.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in after.get_inputs()}})[0]
        diffs[length] = float(np.max(np.abs(a - b)))
    return diffs


def _rewrite(model: onnx.ModelProto, patterns: list[str]) -> RewriteResult:
    """The check alone decides: no library validation (it could drop a wrong fusion and hide the bug)."""
    return apply(model, patterns, validate=False, explain=True)


FOOLING = {  # name: (bias nodes, attention, patterns, what the check's reason says)
    "gpt2-legacy-window-20": (_with_grid(CAUSAL, WINDOW.format(w="w20")), ATTENTION, BOTH, "sequence 22"),
    "gpt2-legacy-window-4096": (_with_grid(CAUSAL, WINDOW.format(w="w4096")), ATTENTION, BOTH, "8195 > 8192"),
    "gpt2-dynamo-window-20": (_with_grid(DYNAMO, WINDOW.format(w="w20")), ATTENTION, BOTH, "sequence 22"),
    "gpt2-dynamo-window-20-mha": (_with_grid(DYNAMO, WINDOW.format(w="w20")), MHA, MHA_BOTH, "sequence 22"),
    "gpt2-float-window": (_with_grid(CAUSAL, FLOAT_WINDOW), ATTENTION, BOTH, "sequence 22"),
    "gpt2-dynamo-late-batch-rows": (_with_grid(DYNAMO, LATE_ROWS), ATTENTION, BOTH, "batch 42"),
    "gpt2-half-window": (_with_grid(DYNAMO, HALF_WINDOW), ATTENTION, BOTH, "sequence 4"),
    "gpt2-prefix-lm": (_with_grid(CAUSAL, PREFIX), ATTENTION, BOTH, "sequence 12"),
    "gpt2-dynamo-prefix-lm": (_with_grid(DYNAMO, PREFIX), MHA, MHA_BOTH, "sequence 12"),
    "bert-band-20": (BAND, ATTENTION, BOTH, "sequence 33"),
    "bert-band-20-mha": (BAND, MHA, MHA_BOTH, "sequence 33"),
    "bert-alibi-padded": (ALIBI_PADDED, ATTENTION, BOTH, "length threshold"),
    "bert-alibi-only": (ALIBI_ONLY, ATTENTION, BOTH, "0 graph inputs"),
}
#: not shown by batch 2 at LENGTHS: a window of 4096 (differs beyond 4096 positions), rows 20+ of a batch
BEYOND_LENGTHS = {"gpt2-legacy-window-4096", "gpt2-dynamo-late-batch-rows"}


@pytest.mark.parametrize("name", list(FOOLING))
def test_exotic_masks_are_left_alone_with_the_reason(name: str) -> None:
    nodes, attention, patterns, reason = FOOLING[name]
    model = _variant(nodes, attention)
    if name not in BEYOND_LENGTHS:  # the old one-length proof's verdict would really change the outputs
        diffs = _max_diffs(model, _rewrite_unchecked(model, patterns))
        assert max(diffs.values()) > 1e-2, f"{name}: plain causal/padding would be equivalent ({diffs})"
    result = _rewrite(model, patterns)
    assert not result.changed, f"{name} was fused: {dict(result.counts)}"
    reasons = [m.reason for p, m in result.near_misses.items() if p in patterns]
    assert any(reason in r for r in reasons), reasons


def _rewrite_unchecked(model: onnx.ModelProto, patterns: list[str]) -> onnx.ModelProto:
    """What a plain causal (or padding) fusion would make of ``model``: the mask-index replacement forced."""
    causal = "grid" in str(model.graph)  # the GPT-2 spellings
    mask = next(i for i in gs.import_onnx(model).inputs if i.name == "mask")
    forced = attention_mask.PaddingBias(mask, attention_mask.CAUSAL_FILTER)  # exact for plain causal/padding
    saved = attention_mask._analyse
    attention_mask._analyse = lambda match, bias, is_causal: forced  # the old one-size proof's verdict
    try:
        result = apply(model, [p for p in patterns if ("causal" in p) == causal], validate=False)
    finally:
        attention_mask._analyse = saved
    assert result.changed
    return result.model


@pytest.mark.parametrize(("name", "nodes", "attention", "patterns", "fused"), [
    ("gpt2-legacy", CAUSAL, ATTENTION, BOTH, "attention-causal-mask-index"),
    ("gpt2-dynamo", DYNAMO, ATTENTION, BOTH, "attention-causal-mask-index"),
    ("gpt2-dynamo-mha", DYNAMO, MHA, MHA_BOTH, "mha-causal-mask-index"),
    ("bert-legacy", LEGACY, ATTENTION, BOTH, "attention-mask-index"),
    ("bert-legacy-mha", LEGACY, MHA, MHA_BOTH, "mha-mask-index"),
])
def test_plain_causal_and_padding_masks_still_fuse_exactly(name: str, nodes: str, attention: str,
                                                           patterns: list[str], fused: str) -> None:
    model = _variant(nodes, attention)
    result = _rewrite(model, patterns)
    assert {k: v for k, v in result.counts.items() if v} == {fused: 1}, name
    diffs = _max_diffs(model, result.model)
    assert max(diffs.values()) <= 1e-4, diffs


def test_a_window_from_another_inputs_shape_is_refused() -> None:
    # the window is the length of a second input's own dim: a size the proof cannot sweep
    window = """
      ps = Shape (past)
      win = Gather <axis = 0> (ps, one_i)
      diff = Sub (rq, rk)
      near = Less (diff, win)
      both = And (grid, near)
"""
    model = _variant(_with_grid(CAUSAL, window), extra_inputs=", float[batch, past_len] past")
    result = _rewrite(model, BOTH)
    assert not result.changed
    assert "'past_len' is not the mask's" in result.near_misses["attention-causal-mask-index"].reason


# --- the other length-dependent proofs: position ids (embed-layernorm), rotary tables (rotary-dynamic) --------

def test_position_ids_wrong_only_past_the_sampled_lengths_are_kept() -> None:
    from test_embed_layernorm import POSITIONS_SLICED
    from test_embed_layernorm import _model as embedding_model

    def with_buffer(skip_from: int) -> onnx.ModelProto:
        model = embedding_model(POSITIONS_SLICED)
        buffer = np.arange(300, dtype=np.int64)[None, :]
        buffer[0, skip_from:] += 1  # a registered position_ids buffer that is 0..skip_from-1, then skips one
        index = next(i for i, t in enumerate(model.graph.initializer) if t.name == "buffer")
        model.graph.initializer[index].CopyFrom(onnx.numpy_helper.from_array(buffer, "buffer"))
        return model

    # proven 0..L-1 at every length up to the buffer's 300: EmbedLayerNormalization's own positions
    assert {k: v for k, v in _rewrite(with_buffer(300), ["embed-layernorm"]).counts.items() if v} == \
        {"embed-layernorm": 1}
    # wrong from position 200 on: only the fallback that hands the op the computed ids fuses
    counts = {k: v for k, v in _rewrite(with_buffer(200), ["embed-layernorm"]).counts.items() if v}
    assert counts == {"embed-layernorm-position-ids": 1}, counts


def test_rotary_tables_with_halves_that_differ_only_late_are_not_fused() -> None:
    from test_rotary import DYNAMIC, _rotary_of

    text = DYNAMIC.replace("SECOND", "f2").replace("ROTARY_Q", _rotary_of("q")).replace("ROTARY_K", _rotary_of("k"))
    text = text.replace("emb = Concat", "late = GreaterOrEqual (p2, f150)\n fx = Mul (freqs, two_f)\n"
                        "f2 = Where (late, fx, freqs)\n emb = Concat")  # the second half doubles from position 150
    dh = 8
    inits = {"s2": np.array([dh // 2]), "e2": np.array([2**62]), "s1": np.array([0]), "e1": np.array([dh // 2]),
             "axes": np.array([-1]), "two_i": np.array(2), "zero_f": np.array(0.0, np.float32),
             "one_f": np.array(1.0, np.float32), "one_1": np.array([1]), "zero_one": np.array([0, 1]),
             "inv_freq": (1.0 / (10000 ** (np.arange(0, dh, 2) / dh))).astype(np.float32),
             "f150": np.array(150.0, np.float32), "two_f": np.array(2.0, np.float32)}
    result = _rewrite(model_from_text(text, initializers=inits), ["rotary"])
    assert not result.changed
    reason = result.near_misses["rotary-dynamic"].reason
    found = re.search(r"for (\d+) positions\) does not have one row per position with equal halves", reason)
    assert found and int(found.group(1)) > 150, reason
