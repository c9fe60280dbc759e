"""``Constant`` nodes become graph constants (initializers), so that every reader sees a ``gs.Constant``."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs


def constants_from_nodes(graph: gs.Graph) -> None:
    """Turn every ``Constant`` node whose output is not a graph output into a graph constant."""
    outputs = {id(t) for t in graph.outputs}
    for node in graph.nodes:
        if node.op != "Constant" or len(node.outputs) != 1 or id(node.outputs[0]) in outputs:
            continue
        value = _constant_value(node)
        if value is None:
            continue
        out = node.outputs[0]
        node.outputs.clear()
        out.to_constant(value)


def _constant_value(node: gs.Node) -> np.ndarray | None:
    attrs = node.attrs
    if "value" in attrs and isinstance(attrs["value"], gs.Constant):
        return attrs["value"].values
    scalar = {"value_float": np.float32, "value_int": np.int64}
    for key, dtype in scalar.items():
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    lists = {"value_floats": np.float32, "value_ints": np.int64}
    for key, dtype in lists.items():
        if key in attrs:
            return np.array(list(attrs[key]), dtype=dtype)
    return None
