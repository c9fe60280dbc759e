"""num_heads and hidden_size read from a model, for the peers that must be told them.

The onnxruntime transformers optimizer fuses attention only when it can work out the head count and hidden
size; given them it does better. For a fair second column, the benchmark reads them from the model itself:
after ONNX shape inference, the first operand of the MatMul that computes the attention scores (walking up
from each Softmax through the mask/scale arithmetic) has shape ``[batch, num_heads, seq, head_size]``.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx

#: Ops between the Q·Kᵀ MatMul and the Softmax: scaling, masking, casts.
_PASS_THROUGH = {"Add", "Sub", "Mul", "Div", "Where", "Cast", "Reshape", "Clip", "Max", "Min"}
_MAX_WALK = 8


def attention_hints(path: Path, inputs: Path | None = None) -> tuple[int, int] | None:
    """(num_heads, hidden_size) of the model's attention, or None when it has none that shapes reveal.

    ``inputs`` (an ``.npz`` of sample inputs) fixes the graph's dynamic input dims first.
    """
    model = onnx.load(str(path))
    if inputs is not None:
        _fix_input_shapes(model.graph, inputs)
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # a model shape inference cannot handle: no hints
        return None
    shapes = _static_shapes(model.graph)
    producers = {out: node for node in model.graph.node for out in node.output}
    found = collections.Counter()
    for node in model.graph.node:
        if node.op_type == "Softmax":
            scores = _scores_matmul(node, producers)
            dims = shapes.get(scores.input[0]) if scores is not None else None
            if dims and len(dims) >= 3 and dims[-3] > 0 and dims[-1] > 0:
                found[(dims[-3], dims[-3] * dims[-1])] += 1
    return found.most_common(1)[0][0] if found else None


def _scores_matmul(softmax: onnx.NodeProto, producers: dict[str, onnx.NodeProto]) -> onnx.NodeProto | None:
    frontier = [softmax.input[0]]
    for _ in range(_MAX_WALK):
        nodes = [producers[name] for name in frontier if name in producers]
        for node in nodes:
            if node.op_type == "MatMul":
                return node
        frontier = [name for node in nodes if node.op_type in _PASS_THROUGH for name in node.input]
        if not frontier:
            return None
    return None


def _fix_input_shapes(graph: onnx.GraphProto, inputs: Path) -> None:
    with np.load(inputs) as data:
        shapes = {name: data[name].shape for name in data.files}
    for info in graph.input:
        shape = shapes.get(info.name)
        dims = info.type.tensor_type.shape.dim
        if shape is None or len(shape) != len(dims):
            continue
        for dim, size in zip(dims, shape, strict=True):
            dim.Clear()
            dim.dim_value = int(size)


def _static_shapes(graph: onnx.GraphProto) -> dict[str, list[int]]:
    shapes = {}
    for info in [*graph.value_info, *graph.input, *graph.output]:
        tensor = info.type.tensor_type
        if tensor.HasField("shape"):
            shapes[info.name] = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
    return shapes
