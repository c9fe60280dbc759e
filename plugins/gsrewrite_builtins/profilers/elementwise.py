"""Profilers of elementwise ops: activations, arithmetic, comparisons, Softmax.

Each output element costs the op's per-element MACs (see the package docstring for the table).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import OpCost, hookimpl
from gsrewrite_builtins.profilers import (
    ADD,
    CMP,
    COS,
    DIV,
    ERF,
    EXP,
    GELU_ERF,
    GELU_TANH,
    LOG,
    MUL,
    SIGMOID,
    SIN,
    SOFTMAX,
    SQRT,
    TANH,
    cost,
    has_input,
    is_standard,
    output_elements,
)

#: op -> MACs per output element
PER_ELEMENT: dict[str, int] = {
    **dict.fromkeys(("Add", "Sub", "Sum", "Neg", "Abs", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
                     "BitwiseNot", "Not", "And", "Or", "Xor", "Sign", "Floor", "Ceil", "Round", "Mean"), ADD),
    **dict.fromkeys(("Mul", "PRelu", "LeakyRelu", "Mod"), MUL),
    **dict.fromkeys(("Relu", "Max", "Min", "Clip", "Equal", "Less", "Greater", "LessOrEqual",
                     "GreaterOrEqual", "Where", "IsNaN", "IsInf", "ThresholdedRelu", "Shrink"), CMP),
    "Div": DIV,
    "Reciprocal": DIV,
    "Exp": EXP,
    "Log": LOG,
    "Sqrt": SQRT,
    "Tanh": TANH,
    "Sin": SIN,
    "Cos": COS,
    "Erf": ERF,
    "Sigmoid": SIGMOID,
    "HardSigmoid": MUL + ADD + CMP,
    "HardSwish": MUL + ADD + CMP + MUL,
    "Swish": SIGMOID + MUL,
    "Elu": EXP + ADD + CMP,
    "Selu": EXP + ADD + CMP + MUL,
    "Celu": EXP + ADD + CMP + DIV,
    "Softplus": EXP + ADD + LOG,
    "Softsign": ADD + DIV,
    "Mish": EXP + ADD + LOG + TANH + MUL,
    "Softmax": SOFTMAX,
    "LogSoftmax": SOFTMAX + LOG,
    "Gelu": GELU_ERF,
    # (q - zero point) * scale, and its inverse with a rounding
    "DequantizeLinear": ADD + MUL,
    "QuantizeLinear": DIV + ADD + CMP,
    "DynamicQuantizeLinear": DIV + ADD + 2 * CMP,
}


def _constant(node: gs.Node, index: int, context: Any) -> np.ndarray | None:
    if index >= len(node.inputs):
        return None
    tensor = node.inputs[index]
    if isinstance(tensor, gs.Constant) and int(np.prod(tensor.shape)) <= 16:
        return np.asarray(tensor.values)
    value = context.value(tensor.name) if context is not None and hasattr(context, "value") else None
    return None if value is None else np.asarray(value)


def pow_cost(node: gs.Node, context: Any) -> int:
    """``x ** e``: e - 1 multiplies for a small positive integer constant e, a sqrt for 0.5, else exp + log."""
    exponent = _constant(node, 1, context)
    if exponent is not None and exponent.size == 1:
        e = float(exponent.reshape(-1)[0])
        if e.is_integer() and 1 <= e <= 8:
            return max(int(e) - 1, 0) * MUL or MUL
        if e == 0.5:
            return SQRT
    return EXP


def profile_elementwise(node: gs.Node, context: Any) -> OpCost:
    out = output_elements(node)
    if node.op == "Pow":
        per = pow_cost(node, context)
    elif node.op == "Gelu":
        per = GELU_TANH if str(node.attrs.get("approximate", "none")) == "tanh" else GELU_ERF
    else:
        per = PER_ELEMENT[node.op]
    if node.op in ("Sum", "Mean", "Max", "Min") and len(node.inputs) > 2:
        per *= len(node.inputs) - 1
    if node.op == "Clip":  # a compare per bound given (opset < 11: attributes, else inputs 1 and 2)
        bounds = sum(1 for i in (1, 2) if has_input(node, i)) if len(node.inputs) > 1 else \
            sum(1 for name in ("min", "max") if name in node.attrs)
        per = CMP * max(bounds, 1)
    return cost(node, None if out is None else out * per)


OPS = frozenset({*PER_ELEMENT, "Pow"})


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    return profile_elementwise(node, context) if is_standard(node) and node.op in OPS else None
