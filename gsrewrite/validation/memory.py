"""How much memory running a model on inputs of given shapes takes, estimated before anything is allocated.

The estimate is the peak of the live activation bytes along the graph's node order: every tensor produced by a
node (and every graph input) counts from its producer until its last consumer, with shapes from
``onnx.shape_inference`` run on the concrete input shapes. Data propagation stays off (onnx's data propagation
materializes the dims a Concat chain computes: a 1 KB model can make it allocate gigabytes), so tensors reshaped
to a computed shape are not counted when inference cannot tell their size: for such graphs the estimate is a lower
bound (the inputs themselves are always counted exactly). Weights are not counted (initializers, Constant
outputs and Identity copies of them: onnxruntime holds them whatever the input size). Nothing is allocated:
large initializers are replaced by graph inputs of the same type and shape before inference.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import onnx
from onnx import helper

from gsrewrite.errors import InputDataError
from gsrewrite.model_io.external_data import available_memory
from gsrewrite.request import bound, current
from gsrewrite.shapes.inference import infer_shapes

log = logging.getLogger(__name__)

#: Initializers with more elements than this are replaced by typed graph inputs for shape inference.
_KEEP_ELEMENTS = 64
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]*)\s*$")


class MemoryBudgetError(InputDataError):
    """Running the original model on even the first input set would take more memory than the budget."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak live activation bytes, and the largest single tensor (name, bytes) at those input shapes."""

    peak: int
    largest: str
    largest_bytes: int


def parse_size(text: str | int) -> int:
    """Bytes from ``2GB``, ``512MiB``, ``1e9``-free integers or a plain number; :class:`InputDataError` if bad."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS:
            raise InputDataError(f"bad memory size {text!r}: expected e.g. 2GB, 512MB, 1GiB or a number of bytes")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise InputDataError(f"bad memory size {text!r}: it must be positive")
    return value


#: The default budget never goes below this: a moment of memory pressure must not refuse an 8 KB model.
MIN_DEFAULT_BUDGET = 256 << 20


def default_budget() -> int:
    """Half the memory available now (``MemAvailable`` in /proc/meminfo, else the physical pages), at least
    :data:`MIN_DEFAULT_BUDGET`."""
    return max(_half_available(), MIN_DEFAULT_BUDGET)


def budget_in_force() -> int:
    """The memory budget of the validation running in this context (:func:`memory_budget`: ``--max-memory``),
    else :func:`default_budget`: what generated values that size a tensor must stay within."""
    budget = current().memory_budget
    return default_budget() if budget is None else budget


@contextlib.contextmanager
def memory_budget(budget: int) -> Iterator[None]:
    """Within: :func:`budget_in_force` is ``budget`` (the request's ``memory_budget``)."""
    with bound(memory_budget=budget):
        yield


def _half_available() -> int:
    """Half of what this process may still use: the machine's available memory, capped by ``ulimit -v``."""
    available = available_memory()
    return available // 2 if available is not None else 8 << 30


def format_bytes(size: int) -> str:
    """``1.5 GB``, ``12 MB``, ``300 bytes``."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


def input_bytes(shapes: Mapping[str, tuple[int, ...]], itemsizes: Mapping[str, int]) -> tuple[int, str, int]:
    """Total bytes of inputs of these shapes, and the largest input (name, bytes); pure arithmetic."""
    sizes = {name: math.prod(shape) * itemsizes.get(name, 8) for name, shape in shapes.items()}
    largest = max(sizes, key=sizes.__getitem__, default="")
    return sum(sizes.values()), largest, sizes.get(largest, 0)


def estimate_peak(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> MemoryEstimate:
    """The peak activation memory of ``model`` run on inputs of ``shapes`` (see the module doc)."""
    inferred = _inferred(model, shapes)
    graph = inferred.graph
    weights = _weights(model.graph)
    sizes = {vi.name: size for vi in [*graph.input, *graph.value_info, *graph.output]
             if vi.name not in weights and (size := _value_bytes(vi)) is not None}
    nodes = [(list(node.input), list(node.output)) for node in graph.node]
    last_use = {name: index for index, (inputs, _) in enumerate(nodes) for name in inputs}
    kept = {o.name for o in graph.output}
    live = {vi.name: sizes.get(vi.name, 0) for vi in graph.input if vi.name in shapes}
    peak = current = sum(live.values())
    for index, (inputs, outputs) in enumerate(nodes):
        for name in outputs:
            if name and name not in live:
                live[name] = sizes.get(name, 0)
                current += live[name]
        peak = max(peak, current)
        for name in {*inputs, *outputs}:
            if name in live and last_use.get(name, -1) <= index and name not in kept:
                current -= live.pop(name)
    largest = max(sizes, key=sizes.__getitem__, default="")
    return MemoryEstimate(peak, largest, sizes.get(largest, 0))


def _weights(graph: onnx.GraphProto) -> set[str]:
    """Initializers, Constant outputs, and Identity copies of either (exporters share weights that way)."""
    weights = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" or (node.op_type == "Identity" and node.input and node.input[0] in weights):
            weights.update(node.output)
    return weights


def _inferred(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
    """A light copy of ``model`` (no large weights, concrete input shapes) after shape inference."""
    light = helper.make_model(_light_graph(model.graph, shapes), opset_imports=model.opset_import,
                              functions=model.functions, ir_version=model.ir_version)
    # the safe entry point (negative dims cleared); no data propagation: an estimate, and it costs 3x the time
    return infer_shapes(light, data_prop=False)


def _light_graph(graph: onnx.GraphProto, shapes: Mapping[str, tuple[int, ...]]) -> onnx.GraphProto:
    light = onnx.GraphProto(name=graph.name)
    light.node.extend(graph.node)
    for out in graph.output:  # the element type only: declared output dims are not trusted, inference sizes them
        elem = out.type.tensor_type.elem_type if out.type.WhichOneof("value") == "tensor_type" else 0
        light.output.append(helper.make_tensor_value_info(out.name, elem, None) if elem else out)
    for vi in graph.input:
        if vi.name in shapes and vi.type.WhichOneof("value") == "tensor_type":
            elem = vi.type.tensor_type.elem_type
            light.input.append(helper.make_tensor_value_info(vi.name, elem, list(shapes[vi.name])))
    names = {vi.name for vi in light.input}
    for tensor in graph.initializer:
        if math.prod(tensor.dims) <= _KEEP_ELEMENTS and tensor.data_location != onnx.TensorProto.EXTERNAL:
            light.initializer.append(tensor)
        elif tensor.name not in names:
            light.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return light


def _value_bytes(vi: onnx.ValueInfoProto) -> int | None:
    tensor = vi.type.tensor_type
    if vi.type.WhichOneof("value") != "tensor_type" or not tensor.HasField("shape"):
        return None
    sizes = [d.dim_value if d.WhichOneof("value") == "dim_value" else -1 for d in tensor.shape.dim]
    if -1 in sizes:
        return None
    return math.prod(sizes) * _itemsize(tensor.elem_type)


@functools.cache
def _itemsize(elem_type: int) -> int:
    try:
        return int(helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except (KeyError, ValueError, TypeError):
        return 4
