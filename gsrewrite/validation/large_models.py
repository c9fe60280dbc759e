"""Writing a model larger than protobuf's 2 GB limit so that onnxruntime can load it by path.

The tensors are moved to one external data file while the model is serialized and put back afterwards, so the
caller's ModelProto is left as it was and the model is never held twice in memory (``onnx.save_model`` with
``save_as_external_data=True`` would change the proto in place; copying it first would double the memory).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import onnx
from onnx import helper

#: The largest message protobuf can serialize (2 GB - 1 byte).
MAX_PROTOBUF_BYTES = 2**31 - 1
#: Tensors with at least this many bytes of raw data go to the external file.
EXTERNAL_THRESHOLD = 1024


def estimated_bytes(model: onnx.ModelProto) -> int:
    """The declared size of the model's tensors held in the proto (references to files are not: they are not
    serialized), computed from their shapes (no data is copied)."""
    return sum(_declared_nbytes(t) for t in _tensors(model) if t.data_location != onnx.TensorProto.EXTERNAL)


def write_with_external_data(model: onnx.ModelProto, folder: Path, threshold: int | None = None) -> Path:
    """Write ``model.onnx`` and ``model.onnx.data`` into ``folder``; return the path of ``model.onnx``.

    Tensors with at least ``threshold`` (default :data:`EXTERNAL_THRESHOLD`) bytes of raw data go to the
    data file. ``model`` is unchanged when this returns (or raises).
    """
    limit = EXTERNAL_THRESHOLD if threshold is None else threshold
    model_path = folder / "model.onnx"
    data_path = folder / "model.onnx.data"
    moved: list[_Moved] = []
    try:
        with open(data_path, "wb") as data_file:
            for tensor in _tensors(model):
                if _movable(tensor, limit):
                    moved.append(_externalize(tensor, data_path.name, data_file))
        model_path.write_bytes(model.SerializeToString())
    finally:
        for tensor, raw, had_location in moved:
            del tensor.external_data[:]
            if not had_location:
                tensor.ClearField("data_location")
            else:
                tensor.data_location = onnx.TensorProto.DEFAULT
            tensor.raw_data = raw
    return model_path


_Moved = tuple[onnx.TensorProto, bytes, bool]


def _movable(tensor: onnx.TensorProto, limit: int) -> bool:
    inline = tensor.data_location != onnx.TensorProto.EXTERNAL and not tensor.external_data
    return inline and tensor.HasField("raw_data") and _declared_nbytes(tensor) >= limit


def _externalize(tensor: onnx.TensorProto, location: str, data_file: BinaryIO) -> _Moved:
    """Move the tensor's raw data to ``data_file``; return what is needed to put it back."""
    had_location = tensor.HasField("data_location")
    raw = tensor.raw_data
    offset = data_file.tell()
    data_file.write(raw)
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(raw)))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor, raw, had_location


def _declared_nbytes(tensor: onnx.TensorProto) -> int:
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        itemsize = 1
    return math.prod(tensor.dims) * itemsize


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _node_tensors(node)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
    for attribute in node.attribute:
        if attribute.HasField("t"):
            yield attribute.t
        yield from attribute.tensors
        if attribute.HasField("g"):
            yield from _graph_tensors(attribute.g)
        for graph in attribute.graphs:
            yield from _graph_tensors(graph)
