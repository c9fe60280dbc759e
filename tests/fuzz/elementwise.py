"""GELU (erf and tanh forms, with and without a preceding bias), MatMul + Add, linear-3d, Conv + BatchNorm,
Conv + bias and rotate-half rotary, with random sizes and near-miss constants."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gsrewrite.testing import model_from_text

from .attention import rotary_tables
from .cases import Case, used
from .spellings import GELU_PRODUCTS, rotary_of

SQRT2 = float(np.sqrt(2.0))


@dataclass
class Gelu:
    hidden: int
    tanh: bool = False
    product: str = "legacy"  # a key of GELU_PRODUCTS
    scale: str = "div"  # erf: x / sqrt(2) or x * (1 / sqrt(2)); tanh: Pow(x, 3) or x * x * x
    constant_error: float = 1.0  # a near miss: sqrt(2) (erf) or 0.044715 (tanh) times this factor
    bias: bool = False  # MatMul + Add(bias) before the GELU (bias-gelu)
    leak: bool = False  # the inner Erf / Tanh is also a graph output


def _erf(g: Gelu) -> str:
    first = "t = Div (x, s)" if g.scale == "div" else "t = Mul (x, s)"
    return f"{first}\n      e = Erf (t)\n      p = Add (e, one)"


def _tanh(g: Gelu) -> str:
    cubed = "x3 = Pow (x, three)" if g.scale == "div" else "xx = Mul (x, x)\n      x3 = Mul (x, xx)"
    return f"{cubed}\n      kx3 = Mul (k, x3)\n      sm = Add (x, kx3)\n      z = Mul (sm, c)\n      e = Tanh (z)\n" \
           "      p = Add (one, e)"


def gelu(g: Gelu, seed: int, label: str) -> Case:
    rng = np.random.default_rng(seed)
    h = g.hidden
    body = (_tanh(g) if g.tanh else _erf(g)) + "\n      " + GELU_PRODUCTS[g.product]
    source = "float[batch, seq, 8] a" if g.bias else f"float[batch, seq, {h}] x"
    pre = "m = MatMul (a, w)\n      x = Add (bias, m)" if g.bias else ""
    outputs = f"float[batch, seq, {h}] y" + (f", float[batch, seq, {h}] e" if g.leak else "")
    text = f"""
    g ({source}) => ({outputs}) {{
      {pre}
      {body}
    }}"""
    s = SQRT2 * g.constant_error
    inits = {"s": np.array(s if g.scale == "div" else 1 / s, np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32), "three": np.array(3.0, np.float32),
             "k": np.array(0.044715 * g.constant_error, np.float32),
             "c": np.array(np.sqrt(2 / np.pi), np.float32),
             "w": (rng.standard_normal((8, h)) / np.sqrt(8)).astype(np.float32),
             "bias": rng.standard_normal(h).astype(np.float32)}
    return Case(model_from_text(text, opset=17, initializers=used(inits, text)), label, spread=2.0)


def matmul_add(k: int, n: int, bias_shape: tuple[int, ...], seed: int, label: str) -> Case:
    """A [batch, k] @ W [k, n] + bias (matmul-add wants a bias over the last axis)."""
    rng = np.random.default_rng(seed)
    text = f"""
    g (float[batch, {k}] a) => (float[batch, {n}] y) {{
      m = MatMul (a, w)
      y = Add (m, bias)
    }}"""
    inits = {"w": rng.standard_normal((k, n)).astype(np.float32),
             "bias": rng.standard_normal(bias_shape).astype(np.float32)}
    return Case(model_from_text(text, opset=17, initializers=inits), label)


def linear_3d(k: int, n: int, trans_b: bool, bias: bool, seed: int, label: str) -> Case:
    """GPT-2's Conv1D in a dynamic export: Reshape(x, [-1, k]) -> Gemm -> Reshape to x's leading dims + [n]."""
    rng = np.random.default_rng(seed)
    gemm_in = "x2, w, c" if bias else "x2, w"
    text = f"""
    g (float[batch, seq, {k}] x) => (float[batch, seq, {n}] y) {{
      dims = Shape (x)
      lead = Slice (dims, zero, minus_one)
      x2 = Reshape (x, flat)
      y2 = Gemm <transB = {int(trans_b)}> ({gemm_in})
      target = Concat <axis = 0> (lead, last)
      y = Reshape (y2, target)
    }}"""
    inits = {"flat": np.array([-1, k], np.int64), "zero": np.array([0], np.int64),
             "minus_one": np.array([-1], np.int64), "last": np.array([n], np.int64),
             "w": rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32),
             "c": rng.standard_normal(n).astype(np.float32)}
    return Case(model_from_text(text, opset=17, initializers=used(inits, text)), label)


@dataclass
class Conv:
    channels: int
    out: int
    kernel: int = 3
    group: int = 1
    stride: int = 1
    dilation: int = 1
    conv_bias: bool = True
    follow: str = "bn"  # bn: BatchNormalization | add: + b[C, 1, 1] (conv-add) | badd: b[1, C, 1, 1] + conv
    eps: float = 1e-5


def conv(c: Conv, seed: int, label: str) -> Case:
    """x [batch, C, seq, seq] -> Conv -> BatchNormalization (or + bias)."""
    rng = np.random.default_rng(seed)
    inputs = "x, w, b" if c.conv_bias else "x, w"
    pad = c.dilation * (c.kernel - 1) // 2
    attrs = (f"kernel_shape = [{c.kernel}, {c.kernel}], group = {c.group}, strides = [{c.stride}, {c.stride}], "
             f"dilations = [{c.dilation}, {c.dilation}], pads = [{pad}, {pad}, {pad}, {pad}]")
    last = {"bn": f"y = BatchNormalization <epsilon = {c.eps!r}> (h, scale, shift, mean, var)",
            "add": "y = Add (h, addend)", "badd": "y = Add (addend, h)"}[c.follow]
    text = f"""
    g (float[batch, {c.channels}, seq, seq] x) => (float[batch, {c.out}, ?, ?] y) {{
      h = Conv <{attrs}> ({inputs})
      {last}
    }}"""
    addend_shape = (c.out, 1, 1) if c.follow == "add" else (1, c.out, 1, 1)
    inits = {"w": rng.standard_normal((c.out, c.channels // c.group, c.kernel, c.kernel)).astype(np.float32),
             "b": rng.standard_normal(c.out).astype(np.float32),
             "scale": rng.uniform(0.5, 2, c.out).astype(np.float32),
             "shift": rng.standard_normal(c.out).astype(np.float32),
             "mean": rng.standard_normal(c.out).astype(np.float32),
             "var": rng.uniform(0.1, 2, c.out).astype(np.float32),
             "addend": rng.standard_normal(addend_shape).astype(np.float32)}
    return Case(model_from_text(text, opset=17, initializers=used(inits, text)), label)


def rotary(heads: int, head_size: int, seed: int, label: str) -> Case:
    """q, k [batch, heads, seq, dh] -> rotate-half with cos/sin computed at run time from the length."""
    tables = rotary_tables().replace("ro_sh = Shape (x)", "ro_sh = Shape (q)").replace(
        "Gather <axis = 0> (ro_sh, one_i)", "Gather <axis = 0> (ro_sh, two_i)")
    dims = f"batch, {heads}, seq, {head_size}"
    text = f"""
    g (float[{dims}] q, float[{dims}] k) => (float[{dims}] yq, float[{dims}] yk) {{
      {tables}
      {rotary_of("q")}
      {rotary_of("k")}
    }}"""
    half = head_size // 2
    inits = {"s2": np.array([half]), "e2": np.array([2**62]), "s1": np.array([0]), "e1": np.array([half]),
             "axes": np.array([-1]), "two_i": np.array(2), "zero": np.array(0.0, np.float32),
             "one": np.array(1.0, np.float32), "ax1": np.array([1]), "zero_one": np.array([0, 1]),
             "inv_freq": (1.0 / (10000 ** (np.arange(0, head_size, 2) / head_size))).astype(np.float32)}
    return Case(model_from_text(text, opset=17, initializers=used(inits, text)), label, spread=2.0)
