"""``fold-conv-affine``: per-channel constant ``Mul`` / ``Add`` after a Conv go into its weight and bias.

Exporters of detection and OCR models (paddle2onnx) write a frozen BatchNormalization, or a scale and shift, as
``Conv -> Mul(c) -> Add(c)`` with ``[C, 1, 1]``-shaped constants; onnxsim folds them, ``optimize`` does through
the pattern engine, and so does ``simplify`` now:

* ``Mul(Conv(x, W, B), s)`` -> ``Conv(x, W * s_c, B * s_c)``;
* ``Add(Conv(x, W, B), a)`` -> ``Conv(x, W, B + a_c)``

where the constant broadcasts along the channel axis only (a scalar, or ones everywhere but the channel axis)
and has the weight's float type; ConvTranspose (group 1) likewise, its weight scaled along axis 1. The Conv's
output must be read by that node alone. Like ``fuse-conv-bn``, the result equals the original up to float
rounding (the product is taken once instead of per element), which validation checks.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.graph.core import NameSource
from gsrewrite.graph.rewiring import constant, drop_disconnected, forward, is_standard, rank, sole_reader
from gsrewrite.simplifier.passes.base import SimplifyPass


class FoldConvAffine(SimplifyPass):
    name = "fold-conv-affine"
    description = "Fold per-channel constant Mul/Add after a Conv or ConvTranspose into its weight and bias."

    def apply(self, graph: gs.Graph) -> int:
        names = NameSource(graph)
        count = 0
        for node in list(graph.nodes):
            if node.op not in ("Mul", "Add") or not is_standard(node) or len(node.inputs) != 2:
                continue
            found = _conv_and_channels(node, graph)
            if found is None:
                continue
            conv, per_channel = found
            _fold(conv, node.op, per_channel, names)
            if forward(graph, node, conv.outputs[0], node.outputs[0]):
                count += 1
        if count:
            drop_disconnected(graph)
        return count


def _conv_and_channels(node: gs.Node, graph: gs.Graph) -> tuple[gs.Node, np.ndarray] | None:
    """The Conv feeding ``node`` and the constant operand as one value per output channel."""
    for data, other in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        conv = _foldable_conv(data, node, graph)
        value = constant(other)
        if conv is None or value is None:
            continue
        weight = constant(conv.inputs[1])
        channels = _per_channel(value, data, weight)
        if channels is not None:
            return conv, channels
    return None


def _foldable_conv(tensor: gs.Tensor, node: gs.Node, graph: gs.Graph) -> gs.Node | None:
    if not isinstance(tensor, gs.Variable) or len(tensor.inputs) != 1 or not sole_reader(tensor, node, graph):
        return None
    conv = tensor.inputs[0]
    if conv.op not in ("Conv", "ConvTranspose") or not is_standard(conv) or len(conv.inputs) < 2:
        return None
    if conv.op == "ConvTranspose" and int(conv.attrs.get("group", 1)) != 1:
        return None
    if not isinstance(conv.inputs[1], gs.Constant) or (len(conv.inputs) > 2 and conv.inputs[2].name
                                                       and not isinstance(conv.inputs[2], gs.Constant)):
        return None
    return conv


def _per_channel(value: np.ndarray, output: gs.Tensor, weight: np.ndarray | None) -> np.ndarray | None:
    """``value`` as a 1-D array of one entry per output channel, when it broadcasts along the channel axis only."""
    r = rank(output)
    if weight is None or weight.dtype.kind != "f" or value.dtype != weight.dtype or r is None or r < 3:
        return None
    if value.ndim > r or output.shape is None:
        return None
    channels = output.shape[1]
    if not isinstance(channels, int):
        return None
    shape = (1,) * (r - value.ndim) + tuple(value.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(weight.dtype)


def _fold(conv: gs.Node, op: str, per_channel: np.ndarray, names: NameSource) -> None:
    weight = constant(conv.inputs[1])
    assert weight is not None  # checked by _foldable_conv
    channel_axis = 0 if conv.op == "Conv" else 1
    bias = constant(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2].name else None
    if bias is None:
        bias = np.zeros(per_channel.shape, weight.dtype)
    if op == "Mul":
        shape = [1] * weight.ndim
        shape[channel_axis] = per_channel.size
        weight = weight * per_channel.reshape(shape)
        bias = bias * per_channel
        conv.inputs[1] = gs.Constant(names(f"{conv.name}_weight"), weight.astype(per_channel.dtype))
    else:
        bias = bias + per_channel
    new_bias = gs.Constant(names(f"{conv.name}_bias"), bias.astype(per_channel.dtype))
    if len(conv.inputs) > 2:
        conv.inputs[2] = new_bias
    else:
        conv.inputs.append(new_bias)
