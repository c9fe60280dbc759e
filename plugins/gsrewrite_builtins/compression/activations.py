"""How much each input channel of a linear layer matters: the sum of its squared inputs over calibration runs
(llama.cpp's importance matrix, the diagonal of ``X^T X``), measured in onnxruntime in the graph itself.

The probe is the model with, per activation read by a weight's MatMul / Gemm / FusedMatMul, ``Cast`` to float,
``Reshape`` to [rows, channels] and ``ReduceSumSquare`` over the rows as an extra output: a vector per activation
leaves the session, never the activations themselves. Its error in the output of ``x @ W`` from an error ``E`` in
``W`` is ``sum_k stat_k * |E_k|^2`` (cross-channel terms aside): the scale search weights each element by it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gsrewrite_builtins.compression.common import initializer_map, unique_name

log = logging.getLogger(__name__)
#: the linear ops whose input activations are measured (their weight at input 1)
LINEAR = ("MatMul", "Gemm", "FusedMatMul")


def linear_inputs(model: onnx.ModelProto) -> dict[str, int]:
    """Activation name -> input channels, for every main-graph linear op reading a 2-D weight at input 1 (directly
    or through a Transpose, a tied LM head), the weight's reduction axis giving the channels."""
    graph = model.graph
    inits = initializer_map(graph)
    transposed = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Transpose" and len(n.input) == 1
                  and n.input[0] in inits}
    found: dict[str, int] = {}
    for node in graph.node:
        if node.op_type not in LINEAR or len(node.input) < 2 or not node.input[0]:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("transA", 0):
            continue
        name = node.input[1]
        flip = bool(attrs.get("transB", 0))
        if name in transposed:
            name, flip = transposed[name], not flip
        weight = inits.get(name)
        if weight is None or len(weight.dims) != 2:
            continue
        found[node.input[0]] = int(weight.dims[1] if flip else weight.dims[0])
    return found


def probe(model: onnx.ModelProto, channels: Mapping[str, int]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` whose outputs are, per activation, the sum over rows of its squares per channel (the model's own
    outputs dropped: what only they need does not run). Returns the probe and activation name -> output name."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    del graph.output[:]
    opset = next((o.version for o in copy.opset_import if o.domain in ("", "ai.onnx")), 13)
    outputs: dict[str, str] = {}
    nodes = []
    for index, (name, count) in enumerate(channels.items()):
        base = unique_name(copy, f"gsrewrite_act{index}")
        shape = numpy_helper.from_array(np.array([-1, count], np.int64), f"{base}_shape")
        graph.initializer.append(shape)
        nodes += [helper.make_node("Cast", [name], [f"{base}_f"], to=onnx.TensorProto.FLOAT),
                  helper.make_node("Reshape", [f"{base}_f", shape.name], [f"{base}_rows"])]
        if opset >= 18:
            axes = numpy_helper.from_array(np.array([0], np.int64), f"{base}_axes")
            graph.initializer.append(axes)
            nodes.append(helper.make_node("ReduceSumSquare", [f"{base}_rows", axes.name], [f"{base}_sum"],
                                          keepdims=0))
        else:
            nodes.append(helper.make_node("ReduceSumSquare", [f"{base}_rows"], [f"{base}_sum"], axes=[0],
                                          keepdims=0))
        graph.output.append(helper.make_tensor_value_info(f"{base}_sum", onnx.TensorProto.FLOAT, [count]))
        outputs[name] = f"{base}_sum"
    graph.node.extend(nodes)
    return copy, outputs


def channel_statistics(model: onnx.ModelProto, feeds: Iterable[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Activation name -> the sum of its squared values per channel over ``feeds``, for every linear op's input
    (:func:`linear_inputs`), measured by one onnxruntime session of :func:`probe`."""
    from gsrewrite.plugin_api import model_session

    channels = linear_inputs(model)
    if not channels:
        return {}
    probed, outputs = probe(model, channels)
    session = model_session(probed, "the calibration probe")
    try:
        totals: dict[str, np.ndarray] = {}
        for feed in feeds:
            values = session.run({k: v for k, v in feed.items() if k in set(session.input_names)})
            for activation, output in outputs.items():
                value = np.asarray(values[output], np.float64)
                totals[activation] = totals.get(activation, 0) + value
    finally:
        session.close()
    return {name: np.asarray(total, np.float32) for name, total in totals.items()}
