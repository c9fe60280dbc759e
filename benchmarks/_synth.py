"""Synthetic transformer-ish graphs with planted decomposed LayerNorms and erf-GELUs, for matcher scaling.

A graph is a chain of blocks of ``BLOCK_NODES`` nodes. Each block holds, in order: one decomposed LayerNorm
(a variant picked per block: Pow or Mul(d, d) for the square, Div or Mul(Reciprocal) for the division,
operands of commutative ops in either order), MatMul + Add, one erf-GELU (Div by sqrt(2) or Mul by
1/sqrt(2), three associations of the final product), MatMul + Add, a residual Add, and then random
elementwise ops. The random ops read the previous tensor and, for binary ops, a tensor from a window of
recent "public" tensors (never a pattern's intermediate), so the graph is a DAG with skip edges and no dead
nodes. The op right before each LayerNorm is unary, so no planted norm can also become a Skip* fusion.

Random ops are chosen from ops that cannot complete a planted template (no ReduceMean, Erf or Sqrt), so
exactly one LayerNorm and one GELU per block must be found.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 16
SHAPE = [1, 4, HIDDEN]
BLOCK_NODES = 50
OPSET = 17
UNARY = ["Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Softsign"]
BINARY = ["Add", "Mul", "Sub", "Max", "Min"]
WINDOW = 12


@dataclass
class Synthetic:
    """A synthetic model and what was planted in it."""

    model: onnx.ModelProto
    nodes: int
    layernorms: int
    gelus: int


@dataclass
class _Builder:
    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    public: list[str] = field(default_factory=list)
    count: int = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"n_{out}", **attrs))
        return out

    def const(self, base: str, value: np.ndarray | float) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def pair(self, a: str, b: str, swap: bool) -> list[str]:
        return [b, a] if swap else [a, b]


def _layernorm(b: _Builder, x: str, variant: int) -> str:
    mean = b.node("ReduceMean", [x], axes=[-1], keepdims=1)
    d = b.node("Sub", [x, mean])
    sq = b.node("Pow", [d, b.const("two", 2.0)]) if variant % 2 == 0 else b.node("Mul", [d, d])
    var = b.node("ReduceMean", [sq], axes=[-1], keepdims=1)
    ve = b.node("Add", b.pair(var, b.const("eps", 1e-5), variant % 3 == 1))
    std = b.node("Sqrt", [ve])
    if variant % 4 < 2:
        n = b.node("Div", [d, std])
    else:
        n = b.node("Mul", b.pair(d, b.node("Reciprocal", [std]), variant % 3 == 2))
    scale = b.const("ln_scale", b.rng.uniform(0.5, 1.5, HIDDEN))
    sn = b.node("Mul", b.pair(n, scale, variant % 2 == 1))
    return b.node("Add", b.pair(sn, b.const("ln_bias", b.rng.normal(0, 0.1, HIDDEN)), variant % 3 == 0))


def _gelu(b: _Builder, x: str, variant: int) -> str:
    if variant % 2 == 0:
        t = b.node("Div", [x, b.const("sqrt2", 1.4142135)])
    else:
        t = b.node("Mul", b.pair(x, b.const("inv_sqrt2", 0.70710677), variant % 3 == 0))
    e = b.node("Erf", [t])
    p = b.node("Add", b.pair(e, b.const("one", 1.0), variant % 3 == 1))
    half = b.const("half", 0.5)
    shape = variant % 3
    if shape == 0:
        return b.node("Mul", [b.node("Mul", [x, p]), half])
    if shape == 1:
        return b.node("Mul", [x, b.node("Mul", [p, half])])
    return b.node("Mul", [b.node("Mul", [half, x]), p])


def _linear(b: _Builder, x: str) -> str:
    w = b.const("w", b.rng.normal(0, 0.2, (HIDDEN, HIDDEN)))
    return b.node("Add", [b.node("MatMul", [x, w]), b.const("bias", b.rng.normal(0, 0.1, HIDDEN))])


def _random_ops(b: _Builder, x: str, count: int) -> str:
    prev = x
    for i in range(count):
        last = i == count - 1  # the op feeding the next LayerNorm is unary (see module docstring)
        if last or b.rng.random() < 0.5:
            prev = b.node(UNARY[int(b.rng.integers(len(UNARY)))], [prev])
        else:
            other = b.public[-int(b.rng.integers(1, min(WINDOW, len(b.public)) + 1))]
            op = BINARY[int(b.rng.integers(len(BINARY)))]
            prev = b.node(op, b.pair(prev, other, bool(b.rng.integers(2))))
        b.public.append(prev)
    return prev


def _block(b: _Builder, x: str, index: int) -> str:
    start = len(b.nodes)
    y = _layernorm(b, x, index)
    h = _linear(b, y)
    g = _gelu(b, h, index)
    r = b.node("Add", b.pair(x, _linear(b, g), index % 2 == 0))
    b.public.append(r)
    return _random_ops(b, r, BLOCK_NODES - (len(b.nodes) - start))


def build(nodes: int, seed: int = 0) -> Synthetic:
    """A model of ``nodes`` nodes (rounded down to whole blocks, at least one block)."""
    b = _Builder(np.random.default_rng(seed))
    blocks = max(1, nodes // BLOCK_NODES)
    x = b.node("Relu", ["x"])
    b.public.append(x)
    for index in range(blocks):
        x = _block(b, x, index)
    graph = helper.make_graph(
        b.nodes, "synthetic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, SHAPE)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="synthetic")
    model.ir_version = 8
    return Synthetic(model, len(b.nodes), blocks, blocks)
