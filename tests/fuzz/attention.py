"""Attention blocks with a dynamic batch and sequence: multi-head (mha, packing, mask index) and grouped-query
(gqa, rotary, mha-4d), in the score and key spellings of tests/patterns/test_mha.py, over the biases of
:mod:`fuzz.masks`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gsrewrite.testing import model_from_text

from .cases import Case, used
from .masks import Bias, constants
from .spellings import KEYS, REPEAT_KV, SCORES, rotary_of


@dataclass
class Heads:
    heads: int
    head_size: int
    kv_heads: int = 0  # grouped-query attention when 0 < kv_heads < heads
    scale_error: float = 1.0  # a near miss: the scores scaled by this factor off 1/sqrt(head_size)
    scores: str = "div"
    keys: str = "legacy"
    leak: str = ""  # "", "probs" or "scores": an intermediate that is also a graph output
    biases: bool = True  # projection biases (MatMul + Add)
    packed: bool = False  # GPT-2: one [D, 3D] projection Split into Q, K and V
    rotary: bool = False

    @property
    def grouped(self) -> bool:
        return 0 < self.kv_heads < self.heads

    @property
    def hidden(self) -> int:
        return self.heads * self.head_size


def score_constant(h: Heads) -> np.ndarray | None:
    """The constant ``c`` of the score spelling, for the scale 1/sqrt(dh) times ``scale_error``."""
    scale = h.scale_error / np.sqrt(h.head_size)
    value = {"div": 1 / scale, "mul": scale, "split": np.sqrt(scale), "none": None}[h.scores]
    return None if value is None else np.array(value, np.float32)


def _projection(name: str, src: str, with_bias: bool) -> str:
    if not with_bias:
        return f"{name} = MatMul ({src}, w{name})"
    return f"{name}m = MatMul ({src}, w{name})\n      {name} = Add ({name}m, b{name})"


def rotary_tables() -> str:
    """cos/sin [1, 1, seq, dh] computed at run time from x's sequence length (LLaMA's dynamic export)."""
    return """
      ro_sh = Shape (x)
      ro_n = Gather <axis = 0> (ro_sh, one_i)
      ro_nf = Cast <to = 1> (ro_n)
      ro_pos = Range (zero, ro_nf, one)
      ro_p2 = Unsqueeze (ro_pos, ax1)
      ro_fr = Mul (ro_p2, inv_freq)
      ro_emb = Concat <axis = -1> (ro_fr, ro_fr)
      ro_c = Cos (ro_emb)
      ro_s = Sin (ro_emb)
      cos = Unsqueeze (ro_c, zero_one)
      sin = Unsqueeze (ro_s, zero_one)"""


def _heads_text(h: Heads) -> tuple[str, str, str]:
    """Q/K/V projections of x to the query [B, H, S, dh], ``kt`` [B, H, dh, S] and the value [B, H, S, dh];
    returns the text and the names of the query and the value."""
    proj = "\n      ".join(_projection(n, "x", h.biases) for n in ("q_lin", "k_lin", "v_lin"))
    if h.packed and not h.grouped:
        proj = _projection("qkv", "x", h.biases) + "\n      q_lin, k_lin, v_lin = Split <axis = -1> (qkv, split3)"
    if not h.grouped and not h.rotary:
        return f"""{proj}
      q3 = Reshape (q_lin, shape4)
      q = Transpose <perm = [0, 2, 1, 3]> (q3)
      {KEYS[h.keys]}
      v3 = Reshape (v_lin, shape4)
      v = Transpose <perm = [0, 2, 1, 3]> (v3)""", "q", "v"
    text = f"""{proj}
      q3 = Reshape (q_lin, shape4)
      qr = Transpose <perm = [0, 2, 1, 3]> (q3)
      k3 = Reshape (k_lin, kvshape)
      kr = Transpose <perm = [0, 2, 1, 3]> (k3)
      v3 = Reshape (v_lin, kvshape)
      vv = Transpose <perm = [0, 2, 1, 3]> (v3)"""
    query, key, value = "qr", "kr", "vv"
    if h.rotary:
        text += rotary_tables() + f"\n      {rotary_of('qr')}\n      {rotary_of('kr')}"
        query, key = "yqr", "ykr"
    if h.grouped:
        text += REPEAT_KV.format(x=key, axis="two_1") + REPEAT_KV.format(x="vv", axis="two_1")
        key, value = f"{key}4", "vv4"
    return text + f"\n      kt = Transpose <perm = [0, 1, 3, 2]> ({key})", query, value


def _weights(h: Heads, rng: np.random.Generator) -> dict[str, np.ndarray]:
    d, kv = h.hidden, (h.kv_heads if h.grouped else h.heads) * h.head_size
    sizes = {"q_lin": d, "k_lin": kv, "v_lin": kv}
    out = {f"w{n}": (rng.standard_normal((d, size)) / np.sqrt(d)).astype(np.float32) for n, size in sizes.items()}
    out.update({f"b{n}": (rng.standard_normal(size) * 0.5).astype(np.float32) for n, size in sizes.items()})
    out["wqkv"] = np.concatenate([out["wq_lin"], out["wk_lin"], out["wv_lin"]], axis=1)
    out["bqkv"] = np.concatenate([out["bq_lin"], out["bk_lin"], out["bv_lin"]])
    return out


def _shape_constants(h: Heads) -> dict[str, np.ndarray]:
    half = h.head_size // 2
    return {
        "shape4": np.array([0, 0, h.heads, h.head_size], np.int64), "shape3": np.array([0, 0, h.hidden], np.int64),
        "split3": np.array([h.hidden] * 3, np.int64),
        "kvshape": np.array([0, 0, h.kv_heads if h.grouped else h.heads, h.head_size], np.int64),
        "two_1": np.array([2], np.int64), "four_1": np.array([4], np.int64), "one_1": np.array([1], np.int64),
        "rep_1": np.array([h.heads // max(h.kv_heads, 1)], np.int64), "heads_1": np.array([h.heads], np.int64),
        "s2": np.array([half], np.int64), "e2": np.array([2**62], np.int64), "s1": np.array([0], np.int64),
        "e1": np.array([half], np.int64), "axes": np.array([-1], np.int64), "zero_one": np.array([0, 1], np.int64),
        "inv_freq": (1.0 / (10000 ** (np.arange(0, h.head_size, 2) / h.head_size))).astype(np.float32),
    }


def _add_bias(bias: Bias | None) -> str:
    """``sb``: the scores plus the bias (first plus the bias's ``first_add``, when it has one: T5's two adds)."""
    if bias is None:
        return "sb = Identity (s)"
    if bias.first_add:
        return f"sfirst = Add (s, {bias.first_add})\n      sb = Add (sfirst, bias)"
    return "sb = Add (s, bias)"


def attention_case(h: Heads, bias: Bias | None, seed: int, label: str) -> Case:
    """x [batch, seq, hidden] (and mask [batch, seq] when ``bias``) -> attention context [batch, seq, hidden]."""
    heads, query, value = _heads_text(h)
    scores = SCORES[h.scores].replace("(q,", f"({query},")
    d = h.hidden
    outputs = f"float[batch, seq, {d}] out"
    outputs += {"": "", "probs": f", float[batch, {h.heads}, seq, seq] p",
                "scores": f", float[batch, {h.heads}, seq, seq] s"}[h.leak]
    mask_input = ", int64[batch, seq] mask" + bias.inputs if bias is not None else ""
    text = f"""
    agraph (float[batch, seq, {d}] x{mask_input}) => ({outputs}) {{
      {heads}
      {scores}
      {bias.text if bias is not None else ""}
      {_add_bias(bias)}
      p = Softmax <axis = -1> (sb)
      ctx = MatMul (p, {value})
      ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
      out = Reshape (ct, shape3)
    }}"""
    inits = {**constants(), **_shape_constants(h), **_weights(h, np.random.default_rng(seed))}
    if bias is not None:
        inits.update(bias.inits)
    c = score_constant(h)
    if c is not None:
        inits["c"] = c
    model = model_from_text(text, opset=17, initializers=used(inits, text))
    row_dependent = bias is not None and bias.row_dependent
    axes = {"out": 1, "p": 2, "s": 2} if row_dependent else {}
    return Case(model, label, query_axis=axes)
