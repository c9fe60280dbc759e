"""Normalizations over x [batch, seq, hidden]: LayerNorm (written out), RMSNorm, skip-LayerNorm and
embeddings + LayerNorm, with random sizes, epsilons and the near misses the checks must refuse (a mean over
another axis, an exponent or constant slightly off, an intermediate with an outside consumer)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gsrewrite.testing import model_from_text

from .cases import Case, used
from .spellings import POSITIONS


@dataclass
class Norm:
    hidden: int
    eps: float = 1e-5
    opset: int = 17
    square: str = "pow"  # pow | mul
    divide: str = "div"  # div | recip | rsqrt (x * (v ** -0.5))
    mean_axes: tuple[int, ...] = (-1,)
    var_axes: tuple[int, ...] = (-1,)
    exponent: float = 2.0
    bias: bool = True
    swap: bool = False  # operand order of the commutative ops
    leak: bool = False  # the centered (or squared) input is also a graph output


def _reduce(opset: int, src: str, out: str, axes: tuple[int, ...], name: str) -> str:
    if opset < 18:
        return f"{out} = ReduceMean <axes = {list(axes)}> ({src})"
    return f"{out} = ReduceMean ({src}, {name})"


def _normalize(n: Norm, num: str, var_eps: str) -> str:
    """``n`` = num / sqrt(var_eps) in the chosen spelling."""
    if n.divide == "rsqrt":
        return f"r = Pow ({var_eps}, minus_half)\n      n = Mul ({num}, r)"
    div = f"std = Sqrt ({var_eps})\n      "
    if n.divide == "div":
        return div + f"n = Div ({num}, std)"
    return div + ("r = Reciprocal (std)\n      " + (f"n = Mul (r, {num})" if n.swap else f"n = Mul ({num}, r)"))


def _common(n: Norm, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"two": np.array(n.exponent, np.float32), "eps": np.array(n.eps, np.float32),
            "minus_half": np.array(-0.5, np.float32), "mean_axes": np.array(n.mean_axes, np.int64),
            "var_axes": np.array(n.var_axes, np.int64),
            "scale": rng.uniform(0.5, 1.5, n.hidden).astype(np.float32),
            "shift": rng.standard_normal(n.hidden).astype(np.float32)}


def _build(n: Norm, body: str, leak: str, rng: np.random.Generator, label: str) -> Case:
    h = n.hidden
    outputs = f"float[batch, seq, {h}] y" + (f", float[batch, seq, {h}] {leak}" if n.leak else "")
    text = f"""
    g (float[batch, seq, {h}] x) => ({outputs}) {{
      {body}
    }}"""
    inits = used(_common(n, rng), text)
    return Case(model_from_text(text, opset=n.opset, initializers=inits), label, spread=3.0)


def _square(n: Norm, src: str) -> str:
    return f"sq = Pow ({src}, two)" if n.square == "pow" else f"sq = Mul ({src}, {src})"


def _affine(n: Norm) -> str:
    scaled = "sn = Mul (scale, n)" if n.swap else "sn = Mul (n, scale)"
    if not n.bias:
        return scaled.replace("sn =", "y =")
    return scaled + "\n      " + ("y = Add (shift, sn)" if n.swap else "y = Add (sn, shift)")


def layernorm(n: Norm, seed: int, label: str) -> Case:
    add_eps = "ve = Add (eps, var)" if n.swap else "ve = Add (var, eps)"
    body = f"""{_reduce(n.opset, "x", "mean", n.mean_axes, "mean_axes")}
      d = Sub (x, mean)
      {_square(n, "d")}
      {_reduce(n.opset, "sq", "var", n.var_axes, "var_axes")}
      {add_eps}
      {_normalize(n, "d", "ve")}
      {_affine(n)}
      {"leak = Relu (d)" if n.leak else ""}"""
    return _build(n, body, "leak", np.random.default_rng(seed), label)


def rmsnorm(n: Norm, seed: int, label: str) -> Case:
    body = f"""{_square(n, "x")}
      {_reduce(n.opset, "sq", "ms", n.mean_axes, "mean_axes")}
      v = Add (ms, eps)
      {_normalize(n, "x", "v")}
      {_affine(n)}
      {"leak = Relu (sq)" if n.leak else ""}"""
    return _build(n, body, "leak", np.random.default_rng(seed), label)


def skip_layernorm(hidden: int, eps: float, projection_bias: bool, sum_used: bool, device: str, seed: int,
                   label: str) -> Case:
    """LayerNormalization(a + b [+ projection bias]), the sum maybe also a graph output."""
    rng = np.random.default_rng(seed)
    dims = f"batch, seq, {hidden}"
    outputs = f"float[{dims}] y" + (f", float[{dims}] s" if sum_used else "")
    residual = "m = MatMul (a, w)\n      t = Add (bias, m)\n      s = Add (t, b)" if projection_bias else \
        "s = Add (b, a)"
    text = f"""
    g (float[{dims}] a, float[{dims}] b) => ({outputs}) {{
      {residual}
      y = LayerNormalization <axis = -1, epsilon = {eps!r}> (s, gamma, beta)
    }}"""
    inits = {"gamma": rng.uniform(0.5, 1.5, hidden).astype(np.float32),
             "beta": rng.standard_normal(hidden).astype(np.float32)}
    if projection_bias:
        inits["w"] = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        inits["bias"] = rng.standard_normal(hidden).astype(np.float32)
    return Case(model_from_text(text, opset=17, initializers=inits), label, device=device)


@dataclass
class Embed:
    hidden: int
    vocab: int
    positions: str = "range"  # sliced | range
    segment: bool = True
    eps: float = 1e-12
    order: str = "bert"  # bert: (word + segment) + position; other: (position + word) + segment
    table_rows: int = 160  # rows of the position table (>= every sequence length run)


def embed_layernorm(e: Embed, seed: int, label: str) -> Case:
    rng = np.random.default_rng(seed)
    seg_input = ", int64[batch, seq] seg" if e.segment else ""
    if e.segment:
        summed = "a = Add (w, s)\n      e = Add (a, p)" if e.order == "bert" else "a = Add (p, w)\n      e = Add (s, a)"
    else:
        summed = "e = Add (w, p)" if e.order == "bert" else "e = Add (p, w)"
    text = f"""
    agraph (int64[batch, seq] ids{seg_input}) => (float[batch, seq, {e.hidden}] y) {{
      {POSITIONS[e.positions]}
      w = Gather <axis = 0> (word, ids)
      {"s = Gather <axis = 0> (segw, seg)" if e.segment else ""}
      p = Gather <axis = 0> (pos, pids)
      {summed}
      y = LayerNormalization <epsilon = {e.eps!r}> (e, gamma, beta)
    }}"""
    h = e.hidden
    inits = {"word": rng.standard_normal((e.vocab, h)).astype(np.float32),
             "pos": rng.standard_normal((e.table_rows, h)).astype(np.float32),
             "gamma": rng.uniform(0.5, 1.5, h).astype(np.float32), "beta": rng.standard_normal(h).astype(np.float32),
             "buffer": np.arange(e.table_rows, dtype=np.int64)[None, :], "zero_i": np.array(0, np.int64),
             "one_i": np.array(1, np.int64), "zero_1": np.array([0], np.int64), "one_1": np.array([1], np.int64)}
    if e.segment:
        inits["segw"] = rng.standard_normal((2, h)).astype(np.float32)
    inits = used(inits, text)
    return Case(model_from_text(text, opset=17, initializers=inits), label, vocab={"ids": e.vocab, "seg": 2})
