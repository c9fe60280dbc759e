"""Values an input should take, read off the graph: positions, and the constants an input is compared with.

* A position input (an integer input named like ``position_ids`` or ``cache_position``) holds the positions of
  the new tokens: ``past, past + 1, ...`` on every row (a decoder's rotary tables and position embeddings are
  indexed by them).
* An input whose value the graph compares with constants (a VAD model's ``sr`` input, compared with 8000 and
  16000 to pick an If branch) takes one of those constants: a random value takes a branch real data never
  takes, or none. Followed through ops that keep the values (Cast, Reshape, ...). When the input also sizes a
  tensor (a ``Range`` limit, a ``ConstantOfShape`` shape, ...), a constant whose tensor would not fit the memory
  budget (``--max-memory``) is not taken: ``n < 6e8`` feeding ``Range(0, n)`` would allocate gigabytes.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict, deque
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from gsrewrite.validation.index_bounds import VALUE_PRESERVING
from gsrewrite.validation.memory import budget_in_force, format_bytes

log = logging.getLogger(__name__)

#: Comparisons whose constant operand is a value the input is expected to take.
COMPARISONS = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
#: Constants larger than this are not candidate values (a lookup table, not a value to compare with).
MAX_CANDIDATES = 8
#: Operands whose values size a tensor (op -> input positions): a length, a shape, repeats, pads.
SIZING = {"Range": (0, 1, 2), "ConstantOfShape": (0,), "Expand": (1,), "Tile": (1,), "OneHot": (1,), "Pad": (1,),
          "Resize": (2, 3), "Upsample": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2)}
#: Bytes per element counted for a tensor a value sizes (the widest numeric type: the estimate is an upper bound)
_SIZED_ITEMSIZE = 8


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
    elements = _declared_elements(graph)
    found: dict[str, list[float]] = {}
    for name in names:
        values: list[float] = []
        sizing = False
        seen, queue = {name}, deque([name])
        while queue:
            for node, index in consumers.get(queue.popleft(), ()):
                sizing |= index in SIZING.get(node.op_type, ()) and node.domain in ("", "ai.onnx")
                if node.op_type in COMPARISONS and len(node.input) == 2:
                    other = constants.get(node.input[1 - index])
                    if other is not None and other.size <= MAX_CANDIDATES:
                        values += [float(v) for v in other.reshape(-1) if float(v) not in values]
                elif node.op_type in VALUE_PRESERVING and index == 0 and node.output and node.output[0] not in seen:
                    seen.add(node.output[0])
                    queue.append(node.output[0])
        if sizing:
            values = _within_budget(name, values, elements.get(name, 1))
        if values:
            found[name] = values
    return found


def _within_budget(name: str, values: list[float], elements: int) -> list[float]:
    """The ``values`` of an input that sizes a tensor whose tensor fits the memory budget: filled with ``v``, the
    input sizes at most ``|v| ** elements`` elements (a length, or every dim of a shape)."""
    budget = budget_in_force()
    kept = [v for v in values if math.isfinite(v) and
            (abs(v) <= 1 or elements * math.log(abs(v)) + math.log(_SIZED_ITEMSIZE) <= math.log(budget))]
    for value in values:
        if value not in kept:
            log.info("input %s is not given %g, a value the graph compares it with: it sizes a tensor, which would "
                     "take more than the memory budget of %s", name, value, format_bytes(budget))
    return kept


def _declared_elements(graph: onnx.GraphProto) -> dict[str, int]:
    """Each graph input's element count as declared (a dynamic dim counted as 1)."""
    return {vi.name: math.prod(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                               for d in vi.type.tensor_type.shape.dim)
            for vi in graph.input if vi.type.HasField("tensor_type")}


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
