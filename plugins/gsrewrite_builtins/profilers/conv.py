"""Profilers of convolutions, pooling and resizing.

Conv: output elements x (input channels per group) x kernel elements, plus one per output element for the
bias. ConvTranspose: input elements x (output channels per group) x kernel elements. Pooling: output elements x
kernel elements (compare or add); global pooling: input elements. Resize: 4 (linear) or 8 (cubic) per output
element, 0 for nearest (onnx-tool's constants).
"""

from __future__ import annotations

from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import OpCost, OpProfiler, ceil_div, floor_div, hookimpl
from gsrewrite_builtins.profilers import ADD, CMP, cost, dims, has_input, input_elements, is_standard, output_elements

RESIZE_LINEAR = 4
RESIZE_CUBIC = 8


def _product(values: list[Any]) -> Any:
    total: Any = 1
    for v in values:
        total = total * v
    return total


def _conv_out_elements(node: gs.Node, x: list[Any] | None, w: list[Any]) -> Any:
    """Output elements from the input and weight shapes (when the output's shape is not given)."""
    if x is None or len(x) != len(w):
        return None
    rank = len(x) - 2
    strides = node.attrs.get("strides", [1] * rank)
    dilations = node.attrs.get("dilations", [1] * rank)
    auto_pad = str(node.attrs.get("auto_pad", "NOTSET"))
    pads = [0] * (2 * rank) if auto_pad == "VALID" else node.attrs.get("pads", [0] * (2 * rank))
    total: Any = x[0] * w[0]
    for i in range(rank):
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            total = total * ceil_div(x[2 + i], strides[i])
        else:
            span = x[2 + i] + pads[i] + pads[i + rank] - dilations[i] * (w[2 + i] - 1) - 1
            total = total * (floor_div(span, strides[i]) + 1)
    return total


def profile_conv(node: gs.Node, context: Any) -> OpCost:
    w_index = 3 if node.op == "QLinearConv" else 1
    w = dims(node.inputs[w_index])
    if w is None or len(w) < 3:
        return cost(node, None)
    out = output_elements(node)
    if out is None:
        out = _conv_out_elements(node, dims(node.inputs[0]), w)
    if out is None:
        return cost(node, None)
    macs = out * _product(w[1:])
    bias_index = 8 if node.op == "QLinearConv" else 2
    if has_input(node, bias_index):
        macs = macs + out * ADD
    return cost(node, macs)


def profile_conv_transpose(node: gs.Node, context: Any) -> OpCost:
    w = dims(node.inputs[1])
    x = input_elements(node)
    if w is None or x is None or len(w) < 3:
        return cost(node, None)
    macs = x * _product(w[1:])
    if has_input(node, 2):
        out = output_elements(node)
        macs = macs + (out * ADD if out is not None else 0)
    return cost(node, macs)


def profile_pool(node: gs.Node, context: Any) -> OpCost:
    kernel = [int(k) for k in node.attrs.get("kernel_shape", [])]
    out = output_elements(node)
    if not kernel or out is None:
        return cost(node, None)
    return cost(node, out * _product(kernel) * (CMP if node.op == "MaxPool" else ADD))


def profile_global_pool(node: gs.Node, context: Any) -> OpCost:
    x = input_elements(node)
    return cost(node, None if x is None else x * (CMP if node.op == "GlobalMaxPool" else ADD))


def profile_resize(node: gs.Node, context: Any) -> OpCost:
    out = output_elements(node)
    mode = str(node.attrs.get("mode", "nearest"))
    per = RESIZE_CUBIC if mode == "cubic" else RESIZE_LINEAR if mode in ("linear", "bilinear") else 0
    return cost(node, None if out is None else out * per)


PROFILERS: dict[str, OpProfiler] = {
    "Conv": profile_conv,
    "ConvInteger": profile_conv,
    "QLinearConv": profile_conv,
    "ConvTranspose": profile_conv_transpose,
    "MaxPool": profile_pool,
    "AveragePool": profile_pool,
    "LpPool": profile_pool,
    "GlobalAveragePool": profile_global_pool,
    "GlobalMaxPool": profile_global_pool,
    "GlobalLpPool": profile_global_pool,
    "Resize": profile_resize,
    "Upsample": profile_resize,
}


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    profiler = PROFILERS.get(node.op) if is_standard(node) else None
    return profiler(node, context) if profiler is not None else None
