"""``--extract-constant`` and ``--extract-op``: pull one constant or one node out of a model.

* :func:`extract_constant` returns the value of an initializer or ``Constant`` node output (any graph);
  the CLI writes it to ``NAME.npy`` next to the output model.
* :func:`extract_node` returns a standalone model holding one node: its non-constant inputs become graph
  inputs (typed by shape inference), its constant inputs stay initializers, its outputs are the graph
  outputs. The CLI writes it to ``NAME.onnx`` — handy to run, profile or debug one op in isolation.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper

from gsrewrite.errors import UsageError
from gsrewrite.graph.conversion import to_graph
from gsrewrite.graph.core import walk_nodes
from gsrewrite.model_io.graph_walk import iter_graphs
from gsrewrite.model_io.weights import tensor_values


def extract_constant(model: onnx.ModelProto, name: str) -> np.ndarray:
    """The value of the initializer or Constant-node output called ``name`` (UsageError if none)."""
    for graph, _ in iter_graphs(model):
        for tensor in graph.initializer:
            if tensor.name == name:
                return tensor_values(tensor)  # a reference to a file read from the bound model folder
        for node in graph.node:
            if node.op_type == "Constant" and list(node.output) == [name]:
                return _constant_node_value(node)
    raise UsageError(f"no constant named {name!r} in the model")


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray:
    attr = node.attribute[0]
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    value = onnx.helper.get_attribute_value(attr)
    if attr.name in ("value_float", "value_floats"):
        return np.array(value, dtype=np.float32)
    if attr.name in ("value_int", "value_ints"):
        return np.array(value, dtype=np.int64)
    raise UsageError(f"constant {node.output[0]!r} is stored as {attr.name}, which cannot be extracted")


def extract_node(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """A model made of the node called ``name`` alone (UsageError if there is no such node)."""
    graph = to_graph(model)
    node = next((n for n in walk_nodes(graph) if n.name == name), None)
    if node is None:
        raise UsageError(f"no node named {name!r} in the model")
    inputs: dict[str, gs.Tensor] = {}
    copies = [_copy(t, inputs) for t in node.inputs]
    outputs = [gs.Variable(t.name, dtype=t.dtype, shape=t.shape) for t in node.outputs]
    single = gs.Node(node.op, node.name, attrs=dict(node.attrs), inputs=copies, outputs=outputs, domain=node.domain)
    standalone = gs.Graph(nodes=[single], inputs=[t for t in inputs.values() if isinstance(t, gs.Variable)],
                          outputs=outputs, name=name, opset=graph.opset)
    out = gs.export_onnx(standalone, do_type_check=False)
    del out.opset_import[:]
    out.opset_import.extend(model.opset_import)
    out.ir_version = model.ir_version
    return out


def _copy(tensor: gs.Tensor, inputs: dict[str, gs.Tensor]) -> gs.Tensor:
    if not tensor.name:
        return gs.Variable.empty()
    if tensor.name not in inputs:
        inputs[tensor.name] = (gs.Constant(tensor.name, np.asarray(tensor.values)) if isinstance(tensor, gs.Constant)
                               else gs.Variable(tensor.name, dtype=tensor.dtype, shape=tensor.shape))
    return inputs[tensor.name]


def safe_file_name(name: str) -> str:
    """``name`` with every character that is not safe in a file name replaced by ``_``."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return cleaned or "unnamed"
