"""Constant folding for canonicalization: nodes whose value is known before the model runs.

A node is folded when every input is a constant, or when it only needs what shape inference already knows
(``Shape`` of a tensor with a fully static shape, ``CastLike``/``Size`` likewise). Outputs larger than
``max_bytes`` stay unfolded, so folding never bloats a model (an ``Expand`` to a large shape remains an
Expand). Values come from ``onnx.reference`` evaluating the single node.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx.reference import ReferenceEvaluator

from gsrewrite.engine.graph import is_empty, subgraph_outer_names

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1 << 20
#: Never folded: random ops, ops with side effects or subgraphs, and ops whose value is not a function of
#: their inputs.
NEVER_FOLD = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "If", "Loop", "Scan", "SequenceConstruct", "SequenceAt", "SequenceInsert", "SequenceEmpty", "Dropout",
})


def fold_constants(graph: gs.Graph, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Fold what can be folded (top level, in topological order); returns the number of folded nodes."""
    outputs = {id(t) for t in graph.outputs}
    outer = subgraph_outer_names(graph)
    folded = 0
    for node in list(graph.nodes):
        if not _foldable(node, outputs, outer):
            continue
        values = _evaluate(node, int(graph.opset))
        if values is None or sum(v.nbytes for v in values) > max(max_bytes, _input_bytes(node)):
            continue
        for tensor, value in zip(list(node.outputs), values, strict=True):
            tensor.to_constant(np.asarray(value))
        node.outputs.clear()
        node.inputs.clear()
        folded += 1
    if folded:
        graph.cleanup(remove_unused_graph_inputs=False)
    return folded


def _foldable(node: gs.Node, graph_outputs: set[int], outer: set[str]) -> bool:
    if node.domain not in (None, "", "ai.onnx") or node.op in NEVER_FOLD or not node.outputs:
        return False
    if any(id(t) in graph_outputs or t.name in outer for t in node.outputs):
        return False
    if not node.inputs:
        return False
    if node.op in ("Shape", "Size"):  # only the (static) shape of the input matters
        return _static_shape(node.inputs[0])
    if node.op == "CastLike":  # only the dtype of the second input matters
        return _constant(node.inputs[0]) and len(node.inputs) == 2 and _known_dtype(node.inputs[1])
    return all(_constant(t) or is_empty(t) for t in node.inputs)


def _constant(tensor: gs.Tensor) -> bool:
    return isinstance(tensor, gs.Constant)


def _known_dtype(tensor: gs.Tensor) -> bool:
    try:
        np.dtype(tensor.dtype)
    except TypeError:
        return False
    return tensor.dtype is not None


def _static_shape(tensor: gs.Tensor) -> bool:
    return tensor.shape is not None and _known_dtype(tensor) and all(isinstance(d, int) for d in tensor.shape)


def _input_bytes(node: gs.Node) -> int:
    return sum(np.asarray(t.values).nbytes for t in node.inputs if isinstance(t, gs.Constant))


def _evaluate(node: gs.Node, opset: int) -> list[np.ndarray] | None:
    feeds = {}
    inputs = []
    for i, tensor in enumerate(node.inputs):
        if is_empty(tensor):
            inputs.append("")
            continue
        name = f"in{i}"
        inputs.append(name)
        feeds[name] = np.asarray(tensor.values) if isinstance(tensor, gs.Constant) else _placeholder(tensor)
    try:
        model = _single_node_model(node, inputs, feeds, opset)
        return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]
    except Exception as exc:  # an op the reference cannot evaluate: leave it alone
        log.debug("not folding %s (%s): %s", node.name, node.op, str(exc).splitlines()[0] if str(exc) else exc)
        return None


def _placeholder(tensor: gs.Tensor) -> np.ndarray:
    """A zero array with the tensor's static shape (else a scalar) and dtype: its values are never read."""
    shape = tensor.shape if _static_shape(tensor) else ()
    return np.zeros(shape, dtype=np.dtype(tensor.dtype))


def _single_node_model(node: gs.Node, inputs: list[str], feeds: dict[str, np.ndarray], opset: int) -> onnx.ModelProto:
    outputs = [f"out{i}" for i in range(len(node.outputs))]
    probe = gs.Graph(nodes=[gs.Node(node.op, attrs=dict(node.attrs),
                                    inputs=[gs.Variable(n) if n else gs.Variable.empty() for n in inputs],
                                    outputs=[gs.Variable(n) for n in outputs])])
    proto_node = gs.export_onnx(probe, do_type_check=False).graph.node[0]
    graph = onnx.helper.make_graph(
        [proto_node], "fold",
        [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()],
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
