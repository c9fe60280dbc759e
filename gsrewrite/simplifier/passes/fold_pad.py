"""``fold-pad``: a constant ``Pad`` before a Conv or a pooling node becomes that node's own padding.

Exact cases only (``Pad`` in ``constant`` mode, constant non-negative pads on the spatial axes, none on batch
and channel, the consumer's ``auto_pad`` NOTSET, the Pad's output read by that node alone):

* ``Conv``: pad value 0 (Conv pads with zeros);
* ``AveragePool`` with ``count_include_pad=1`` and pad value 0 (the padded zeros count in the average either
  way); with ``count_include_pad=0`` the averages at the border differ, so it stays;
* ``MaxPool``: pad value ``-inf`` (MaxPool's own padding never wins a max), or 0 when the input is the output
  of a Relu (nothing below 0 to lose).

The Pad's amounts are added to the node's ``pads`` (``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``).
"""

from __future__ import annotations

import math

import onnx_graphsurgeon as gs

from gsrewrite.graph.rewiring import (
    constant,
    constant_ints,
    disconnect_if_unused,
    drop_disconnected,
    is_standard,
    rank,
    sole_reader,
)
from gsrewrite.simplifier.passes.base import SimplifyPass

_CONSUMERS = frozenset({"Conv", "AveragePool", "MaxPool"})
#: Pad moved pads, constant_value and axes from attributes to inputs at these opsets
_PADS_INPUT_SINCE = 11
_AXES_INPUT_SINCE = 18


class FoldPad(SimplifyPass):
    name = "fold-pad"
    description = "Fold a constant zero Pad into the following Conv, AveragePool or MaxPool's pads (exact)."

    def apply(self, graph: gs.Graph) -> int:
        opset = int(graph.opset)
        count = 0
        for node in graph.nodes:
            if node.op not in _CONSUMERS or not is_standard(node) or not node.inputs:
                continue
            pad = _pad_producer(node.inputs[0], node, graph)
            if pad is None:
                continue
            spatial = _spatial_pads(pad, opset)
            if spatial is None or not _value_allowed(node, pad, opset):
                continue
            if _merge(node, spatial):
                node.inputs[0] = pad.inputs[0]
                disconnect_if_unused(pad, graph)
                count += 1
        if count:
            drop_disconnected(graph)
        return count


def _pad_producer(tensor: gs.Tensor, node: gs.Node, graph: gs.Graph) -> gs.Node | None:
    if not isinstance(tensor, gs.Variable) or len(tensor.inputs) != 1 or not sole_reader(tensor, node, graph):
        return None
    pad = tensor.inputs[0]
    if pad.op != "Pad" or not is_standard(pad) or pad.attrs.get("mode", "constant") not in ("constant", b"constant"):
        return None
    return pad


def _spatial_pads(pad: gs.Node, opset: int) -> list[int] | None:
    """The pads of the spatial axes ``[x1_begin, ..., x1_end, ...]`` when batch and channel get none."""
    r = rank(pad.inputs[0])
    if r is None or r < 3:
        return None
    pads = constant_ints(pad.inputs[1]) if opset >= _PADS_INPUT_SINCE and len(pad.inputs) > 1 \
        else [int(p) for p in pad.attrs.get("pads", [])]
    if pads is None:
        return None
    axes = _axes(pad, opset, r)
    if axes is None or len(pads) != 2 * len(axes):
        return None
    full = [0] * (2 * r)
    for i, axis in enumerate(axes):
        full[axis], full[axis + r] = pads[i], pads[i + len(axes)]
    if any(p < 0 for p in full) or full[0] or full[1] or full[r] or full[r + 1]:
        return None
    return full[2:r] + full[r + 2:]


def _axes(pad: gs.Node, opset: int, r: int) -> list[int] | None:
    if opset < _AXES_INPUT_SINCE or len(pad.inputs) < 4 or not pad.inputs[3].name:
        return list(range(r))
    axes = constant_ints(pad.inputs[3])
    if axes is None:
        return None
    axes = [a + r if a < 0 else a for a in axes]
    return axes if all(0 <= a < r for a in axes) and len(set(axes)) == len(axes) else None


def _pad_value(pad: gs.Node, opset: int) -> float | None:
    if opset < _PADS_INPUT_SINCE:
        return float(pad.attrs.get("value", 0.0))
    if len(pad.inputs) < 3 or not pad.inputs[2].name:
        return 0.0
    value = constant(pad.inputs[2])
    return None if value is None or value.size != 1 else float(value.reshape(-1)[0])


def _value_allowed(node: gs.Node, pad: gs.Node, opset: int) -> bool:
    value = _pad_value(pad, opset)
    if value is None:
        return False
    if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return False
    if node.op == "Conv":
        return value == 0.0
    if node.op == "AveragePool":
        return value == 0.0 and int(node.attrs.get("count_include_pad", 0)) == 1
    return value == -math.inf or (value == 0.0 and _non_negative(pad.inputs[0]))  # MaxPool


def _non_negative(tensor: gs.Tensor) -> bool:
    producer = tensor.inputs[0] if isinstance(tensor, gs.Variable) and tensor.inputs else None
    return producer is not None and producer.op == "Relu" and is_standard(producer)


def _merge(node: gs.Node, spatial: list[int]) -> bool:
    """Add ``spatial`` to the node's pads; False (nothing changed) when the node's pads have another length."""
    current = [int(p) for p in node.attrs.get("pads", [0] * len(spatial))]
    if len(current) != len(spatial):
        return False
    node.attrs["pads"] = [int(a) + int(b) for a, b in zip(current, spatial, strict=True)]
    node.attrs.pop("auto_pad", None)
    return True
