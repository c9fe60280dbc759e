"""Which outputs of a model hold class scores, and along which axis: their top-1 agreement is reported beside
cosine (and judged when the criterion sets ``min_top1``).

A float output holds class scores when, in this order:

1. an ArgMax or TopK node of the main graph reads it: that node's axis (ArgMax's default 0, TopK's -1);
2. a Softmax or LogSoftmax computes it: its axis (default -1 from opset 13, 1 before);
3. its name contains ``logits`` (the name Hugging Face exports give a classifier's or a language model's
   scores): the last axis;
4. it is 2-D (``[batch, classes]``) and a linear layer computes it (Gemm, MatMul, or an Add of a MatMul's or
   Gemm's result): the last axis. BERT's pooler (Tanh of a Gemm) is not taken; a 2-D regression head is, which
   costs one line of report unless ``min_top1`` is set.

Outputs of any other kind, and a class axis of fewer than two entries, get no top-1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

LINEAR = ("Gemm", "MatMul")


@dataclass(frozen=True)
class ClassAxis:
    """The class axis of an output; ``rank``: the output must have this rank (rule 4), ``None``: any."""

    axis: int
    rank: int | None = None

    def of(self, array: np.ndarray) -> int | None:
        """The axis (non-negative) of ``array``, or ``None`` when ``array`` does not fit (rank, fewer than two
        classes, no elements)."""
        if (self.rank is not None and array.ndim != self.rank) or not -array.ndim <= self.axis < array.ndim:
            return None
        axis = self.axis % array.ndim
        return axis if array.shape[axis] >= 2 and array.size else None


def class_axes(model: onnx.ModelProto) -> dict[str, ClassAxis]:
    """Output name -> its class axis, for the outputs of ``model`` that hold class scores (module docstring)."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    producer = {name: node for node in graph.node for name in node.output}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    found: dict[str, ClassAxis] = {}
    for node in graph.node:
        if node.op_type in ("ArgMax", "TopK") and node.domain in ("", "ai.onnx") and node.input \
                and node.input[0] in outputs:
            found.setdefault(node.input[0], ClassAxis(_axis(node, 0 if node.op_type == "ArgMax" else -1)))
    for name in outputs - found.keys():
        node = producer.get(name)
        if node is not None and node.op_type in ("Softmax", "LogSoftmax") and node.domain in ("", "ai.onnx"):
            found[name] = ClassAxis(_axis(node, -1 if opset >= 13 else 1))
        elif "logits" in name.lower():
            found[name] = ClassAxis(-1)
        elif node is not None and _linear(node, producer):
            found[name] = ClassAxis(-1, rank=2)
    return found


def _axis(node: onnx.NodeProto, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), default)


def _linear(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto]) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in LINEAR:
        return True
    return node.op_type == "Add" and any(
        (p := producer.get(name)) is not None and p.op_type in LINEAR for name in node.input)
