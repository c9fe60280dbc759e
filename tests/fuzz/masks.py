"""Additive attention-score biases computed from a [batch, seq] ``mask`` input, as exporters spell them.

Every builder returns a :class:`Bias`: graph text that ends in ``bias`` (broadcastable to [batch, heads, seq,
seq]), the constants it reads, and whether it depends on the query row (causal, windows, ...: then padded
query rows may have no visible key and are not compared). Padding-only biases reuse the spellings of
tests/patterns/test_attention_mask.py; the rest rewrite its GPT-2 causal grid (``grid = LessOrEqual (rk,
rq)``) into other shapes of visibility, or slice a constant [.., T, T] table the way GPT-2's legacy export
slices its causal buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .spellings import CAUSAL_GPT2, PADDING_LEGACY

#: rows and columns of the constant bias tables: past every size the fuzzer and validation run
TABLE = 160
LOWEST = float(np.finfo(np.float32).min)
CAUSAL_GRID = "grid = LessOrEqual (rk, rq)"


@dataclass
class Bias:
    text: str
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    row_dependent: bool = True
    #: graph inputs the bias reads besides ``mask`` (declarations in the textual syntax)
    inputs: str = ""
    #: a tensor added to the scores before ``bias`` (two additive biases in a row, as T5 writes them)
    first_add: str = ""


def constants() -> dict[str, np.ndarray]:
    """The small constants every spelling may read (unused ones are dropped by the model builder)."""
    return {
        "one": np.array(1.0, np.float32), "big": np.array(-10000.0, np.float32),
        "lowest": np.array(LOWEST, np.float32), "zero": np.array(0.0, np.float32),
        "zero_i": np.array(0, np.int64), "one_i": np.array(1, np.int64), "ax1": np.array([1], np.int64),
        "ax2": np.array([2], np.int64), "ax12": np.array([1, 2], np.int64), "zero_1": np.array([0], np.int64),
        "zero_2": np.array([0, 0], np.int64), "ax23": np.array([2, 3], np.int64),
    }


def padding(spelling: str) -> Bias:
    """(1 - mask) * -10000 over the keys: HF BERT's expanded form, without the Expand, or Where(lowest)."""
    if spelling == "legacy":
        return Bias(PADDING_LEGACY, row_dependent=False)
    if spelling == "plain":  # [batch, 1, 1, seq], broadcast by the Add
        return Bias(PADDING_LEGACY.split("sm = Shape")[0].replace("small =", "bias ="), row_dependent=False)
    return Bias("""
      eq = Equal (mask, zero_i)
      e4 = Unsqueeze (eq, ax12)
      bias = Where (e4, lowest, zero)""", row_dependent=False)


def _grid(lines: str) -> Bias:
    """GPT-2's causal + padding spelling with its key <= query grid replaced by ``lines`` (ending in ``grid``)."""
    return Bias(CAUSAL_GPT2.replace(CAUSAL_GRID, lines.strip()))


def causal() -> Bias:
    return Bias(CAUSAL_GPT2)


def sliding_window(window: int) -> Bias:
    """Mistral: causal and query - key < window."""
    return Bias(_grid("""
      g0 = LessOrEqual (rk, rq)
      dist = Sub (rq, rk)
      near = Less (dist, window)
      grid = And (g0, near)""").text, {"window": np.array(window, np.int64)})


def band(width: int) -> Bias:
    """|query - key| <= width: a local, bidirectional band."""
    return Bias(_grid("""
      dist = Sub (rq, rk)
      ad = Abs (dist)
      grid = LessOrEqual (ad, width)""").text, {"width": np.array(width, np.int64)})


def prefix_lm(prefix: int) -> Bias:
    """Causal, except that the first ``prefix`` keys are seen by every query."""
    return Bias(_grid("""
      g0 = LessOrEqual (rk, rq)
      g1 = Less (rk, prefix)
      grid = Or (g0, g1)""").text, {"prefix": np.array(prefix, np.int64)})


def chunked(chunk: int) -> Bias:
    """Llama 4's chunked attention: causal within blocks of ``chunk`` positions."""
    return Bias(_grid("""
      g0 = LessOrEqual (rk, rq)
      cq = Div (rq, chunk)
      ck = Div (rk, chunk)
      same = Equal (cq, ck)
      grid = And (g0, same)""").text, {"chunk": np.array(chunk, np.int64)})


def anti_causal() -> Bias:
    """A near miss: key >= query (the mirror of causal)."""
    return _grid("grid = LessOrEqual (rq, rk)")


def alibi(heads: int, slope_base: float) -> Bias:
    """ALiBi: causal + padding, plus -slope[h] * (query - key), one slope per head ([batch, heads, seq, seq])."""
    slopes = (slope_base ** -np.arange(1, heads + 1, dtype=np.float64)).astype(np.float32).reshape(1, heads, 1, 1)
    text = CAUSAL_GPT2.replace("bias = Where", "cb = Where") + """
      dk = Sub (rk, rq)
      df = Cast <to = 1> (dk)
      al = Mul (df, slopes)
      bias = Add (al, cb)"""
    return Bias(text, {"slopes": slopes})


def table(values: np.ndarray, row_dependent: bool = True) -> Bias:
    """A constant [1, heads or 1, T, T] table sliced to [.., seq, seq], plus the legacy padding bias."""
    text = PADDING_LEGACY.split("sm = Shape")[0] + """
      tsh = Shape (mask)
      tn = Slice (tsh, ax1, ax2)
      ends = Concat <axis = 0> (tn, tn)
      tb = Slice (table, zero_2, ends, ax23)
      bias = Add (tb, small)"""
    return Bias(text, {"table": values.astype(np.float32)}, row_dependent)


def window_table(window: int, heads: int = 1) -> np.ndarray:
    """0 where 0 <= query - key < window, -10000 elsewhere (``window`` >= TABLE: plain causal)."""
    q, k = np.arange(TABLE)[:, None], np.arange(TABLE)[None, :]
    keep = (k <= q) & (q - k < window)
    return np.broadcast_to(np.where(keep, 0.0, -10000.0), (1, heads, TABLE, TABLE))


def trilu(window: int | None) -> Bias:
    """torch.tril(ones) (minus a lower tril shifted by ``window``: a sliding window) as (1 - keep) * -10000."""
    lines = """
      tsh = Shape (mask)
      tn = Slice (tsh, ax1, ax2)
      nn = Concat <axis = 0> (tn, tn)
      ones = Expand (one, nn)
      keep = Trilu <upper = 0> (ones)"""
    inits = {}
    if window is not None:
        lines = lines.replace("keep = Trilu", "low = Trilu") + """
      old = Trilu <upper = 0> (ones, shift)
      keep = Sub (low, old)"""
        inits["shift"] = np.array(-window, np.int64)
    text = PADDING_LEGACY.split("sm = Shape")[0] + lines + """
      drop = Sub (one, keep)
      cb = Mul (drop, big)
      bias = Add (cb, small)"""
    return Bias(text, inits)


def float_input(heads: int, two_adds: bool = False) -> Bias:
    """A bias fed as a graph input of random floats ([batch, heads or 1, seq, seq]) and a padding bias, summed
    first or added to the scores one after the other."""
    inputs = f", float[batch, {heads}, seq, seq] extra"
    if two_adds:
        text = PADDING_LEGACY.split("sm = Shape")[0].replace("small =", "bias =")
        return Bias(text, row_dependent=False, inputs=inputs, first_add="extra")
    text = PADDING_LEGACY.split("sm = Shape")[0] + "\n      bias = Add (extra, small)"
    return Bias(text, row_dependent=False, inputs=inputs)
