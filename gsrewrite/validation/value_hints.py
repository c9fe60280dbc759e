"""Values an input should take, read off the graph: positions, and the constants an input is compared with.

* A position input (an integer input named like ``position_ids`` or ``cache_position``) holds the positions of
  the new tokens: ``past, past + 1, ...`` on every row (a decoder's rotary tables and position embeddings are
  indexed by them).
* An input whose value the graph compares with constants (a VAD model's ``sr`` input, compared with 8000 and
  16000 to pick an If branch) takes one of those constants: a random value takes a branch real data never
  takes, or none. Followed through ops that keep the values (Cast, Reshape, ...).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from gsrewrite.validation.index_bounds import VALUE_PRESERVING

#: Comparisons whose constant operand is a value the input is expected to take.
COMPARISONS = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
#: Constants larger than this are not candidate values (a lookup table, not a value to compare with).
MAX_CANDIDATES = 8


def is_position(name: str) -> bool:
    """An input holding token positions, by its name (``position_ids``, ``cache_position``)."""
    return "position" in name.lower()


def compared_values(graph: onnx.GraphProto, names: Sequence[str]) -> dict[str, list[float]]:
    """For each of ``names`` the graph compares with constants: those constants, in the order met (the values
    the model expects it to take)."""
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in graph.node:
        for index, name in enumerate(node.input):
            consumers[name].append((node, index))
    constants = _constants(graph)
    found: dict[str, list[float]] = {}
    for name in names:
        values: list[float] = []
        seen, queue = {name}, deque([name])
        while queue:
            for node, index in consumers.get(queue.popleft(), ()):
                if node.op_type in COMPARISONS and len(node.input) == 2:
                    other = constants.get(node.input[1 - index])
                    if other is not None and other.size <= MAX_CANDIDATES:
                        values += [float(v) for v in other.reshape(-1) if float(v) not in values]
                elif node.op_type in VALUE_PRESERVING and index == 0 and node.output and node.output[0] not in seen:
                    seen.add(node.output[0])
                    queue.append(node.output[0])
        if values:
            found[name] = values
    return found


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Small constants by name: initializers and Constant nodes (their values read only when small)."""
    out: dict[str, np.ndarray] = {}
    for tensor in graph.initializer:
        if _elements(tensor.dims) <= MAX_CANDIDATES and tensor.data_location != onnx.TensorProto.EXTERNAL:
            out[tensor.name] = _values(tensor)
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attribute in node.attribute:
                if attribute.name == "value" and _elements(attribute.t.dims) <= MAX_CANDIDATES:
                    out[node.output[0]] = _values(attribute.t)
                elif attribute.name in ("value_int", "value_float"):
                    out[node.output[0]] = np.array([attribute.i if attribute.name == "value_int" else attribute.f])
                elif attribute.name in ("value_ints", "value_floats") and \
                        len(attribute.ints or attribute.floats) <= MAX_CANDIDATES:
                    out[node.output[0]] = np.array(list(attribute.ints or attribute.floats))
    return {k: v for k, v in out.items() if v.dtype.kind in "biuf"}


def _values(tensor: onnx.TensorProto) -> np.ndarray:
    try:
        return np.asarray(numpy_helper.to_array(tensor))
    except Exception:  # a malformed constant is no candidate
        return np.zeros(0)


def _elements(dims: Sequence[int]) -> int:
    total = 1
    for d in dims:
        total *= max(int(d), 0)
    return total
