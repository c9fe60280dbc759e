"""Built-in op profilers, one module per op family, each a ``gsrewrite_profile_op`` hook implementation like
any plugin's (a third-party plugin registered later is asked first, so it can add or override an op).

Conventions (docs/profile.md):

* 1 MAC = one multiply-accumulate = 2 FLOPs. MatMul/Gemm/Conv count ``output elements x reduction length``;
  a bias add counts one per output element (so MatMul + Add and the Gemm that replaces them count the same).
* Elementwise ops count a per-element cost taken from onnx-tool's table (add, multiply, compare 1; divide 4;
  exp 32; log 43; sqrt 24; tanh 38; sin/cos 39) so totals compare with it, except where onnx-tool counts
  nothing for real work: erf is counted as a rational approximation (exp + 9 multiply-adds + divide = 45).
  ``Pow`` by a constant integer ``e`` is ``e - 1`` multiplies (``x ** 2`` is ``x * x``), ``** 0.5`` a sqrt.
* A fused op (onnxruntime contrib ops, LayerNormalization, Gelu) counts the ops it replaces, in the form
  exporters emit them, so fusing does not change a model's total.
* Ops that only move data (Reshape, Transpose, Gather, Concat, ...) count 0 MACs.

Shapes may be symbolic: dims are ``int`` or :mod:`gsrewrite.shapes.symdim` expressions (``str`` dims of a
plain graphsurgeon node are read as expressions too), and MACs are then expressions in the input dims.
"""

from __future__ import annotations

import math
from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import DimValue, OpCost, dim_of

ADD = MUL = CMP = 1
DIV = 4
EXP = 32
LOG = 43
SQRT = 24
TANH = EXP + 2 * ADD + DIV
SIN = COS = 39
ERF = EXP + 9 * ADD + DIV
SIGMOID = EXP + ADD + DIV
#: Gelu in the erf form exporters emit: x / sqrt(2) (Div), Erf, + 1, * x, * 0.5
GELU_ERF = DIV + ERF + ADD + 2 * MUL
#: tanh form: x**3 (2 Mul), * 0.044715, + x, * sqrt(2/pi), Tanh, + 1, * x, * 0.5
GELU_TANH = 2 * MUL + MUL + ADD + MUL + TANH + ADD + 2 * MUL
#: LayerNormalization as exporters decompose it, per element: ReduceMean, Sub, Pow 2, ReduceMean, Div,
#: Mul (scale), Add (bias); per row: Add (epsilon), Sqrt
LAYERNORM = ADD + ADD + MUL + ADD + DIV + MUL + ADD
LAYERNORM_ROW = ADD + SQRT
#: RMS normalization: Pow 2, ReduceMean, Div (or Mul by the reciprocal), Mul (scale); per row: Add, Sqrt
RMSNORM = MUL + ADD + DIV + MUL
#: Softmax, as onnx-tool counts it: exp + divide per element
SOFTMAX = EXP + DIV


def dims(tensor: Any) -> list[DimValue] | None:
    """The tensor's shape as dims (``None`` when the shape or a dim is unknown)."""
    shape = getattr(tensor, "shape", None)
    if shape is None:
        return None
    out = []
    for d in shape:
        value = dim_of(d)
        if value is None:
            return None
        out.append(value)
    return out


def elements(tensor: Any) -> DimValue | None:
    shape = dims(tensor)
    if shape is None:
        return None
    total: DimValue = 1
    for d in shape:
        total = total * d
    return total


def output_elements(node: gs.Node, index: int = 0) -> DimValue | None:
    return elements(node.outputs[index]) if index < len(node.outputs) else None


def input_elements(node: gs.Node, index: int = 0) -> DimValue | None:
    return elements(node.inputs[index]) if index < len(node.inputs) and node.inputs[index].name else None


def params(node: gs.Node) -> int:
    """Elements of the node's constant inputs."""
    return sum(math.prod(t.shape) for t in node.inputs if isinstance(t, gs.Constant))


def has_input(node: gs.Node, index: int) -> bool:
    return index < len(node.inputs) and bool(node.inputs[index].name)


def scaled(count: DimValue | None, per_element: int) -> DimValue | None:
    return None if count is None else count * per_element


def cost(node: gs.Node, macs: DimValue | None) -> OpCost:
    return OpCost(macs=macs, params=params(node))


def is_standard(node: gs.Node) -> bool:
    return node.domain in (None, "", "ai.onnx")
