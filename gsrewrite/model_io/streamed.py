"""Writing a model whose weights stay in their files: every payload is copied from its source file to the output in
chunks, never held in memory whole (a model loaded weightless carries its weights as references: see
:mod:`gsrewrite.model_io.weightless`).

* :func:`write_inline`: one ``.onnx`` file, every referenced initializer of the main graph inline again. The
  protobuf is written field by field: the model's other fields, then the graph's, then each initializer as its
  header followed by its ``raw_data`` field, whose bytes are copied from the source range (protobuf readers take
  fields in any order; the lengths are known before anything is written).
* :func:`write_external`: the graph in the ``.onnx`` file and every initializer of ``threshold`` bytes or more in
  one data file beside it, each payload at an offset aligned to :data:`ALIGNMENT` (onnxruntime maps aligned
  ranges instead of copying them), copied from its source (a referenced range, or the tensor's own ``raw_data``).

Only main-graph initializers move; tensors in subgraphs and attributes stay as they are. The caller owns the files
(atomic writes, cleanup): these functions only write to the open files they are given.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, TypeVar

from google.protobuf.message import Message
from onnx import GraphProto, ModelProto, StringStringEntryProto, TensorProto

from gsrewrite.model_io.weightless import external_range
from gsrewrite.model_io.wire import LEN, varint_bytes

#: bytes copied at a time
CHUNK = 16 << 20
#: payload offsets in a written data file are multiples of this (a page: onnxruntime maps such ranges)
ALIGNMENT = 4096

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_M = TypeVar("_M", ModelProto, GraphProto)


@dataclass(frozen=True)
class Range:
    """Where a payload lies: ``length`` bytes at ``offset`` of ``path``."""

    path: str
    offset: int
    length: int


def source_range(tensor: TensorProto, base_dir: str | None) -> Range | None:
    """The file range a referenced (external or weightless-loaded) tensor's payload lies in; None for a tensor
    that holds its values."""
    if tensor.data_location != TensorProto.EXTERNAL or base_dir is None:
        return None
    found = external_range(tensor, base_dir)
    if found is None:
        raise ValueError(f"tensor {tensor.name!r}: external data entries are not a location, offset and length")
    path, offset, length, _ = found
    return Range(path, offset, length)


def write_inline(model: ModelProto, out: BinaryIO, base_dir: str | None) -> int:
    """Write ``model`` to ``out`` as one serialized ModelProto with every referenced main-graph initializer inline
    (payloads copied from ``base_dir``'s files in chunks); the bytes written."""
    ranges = [source_range(t, base_dir) for t in model.graph.initializer]
    if not any(ranges):
        data = model.SerializeToString()
        out.write(data)
        return len(data)
    head = _without_graph(model)
    graph_bytes = _graph_shell(model.graph).SerializeToString()
    pieces = [_inline_piece(t, r) for t, r in zip(model.graph.initializer, ranges, strict=True)]
    graph_length = len(graph_bytes) + sum(_field_length(size) for _, _, size in pieces)
    written = _write(out, head.SerializeToString()) + _write(out, _key(_MODEL_GRAPH) + varint_bytes(graph_length))
    written += _write(out, graph_bytes)
    for header, payload, size in pieces:
        written += _write(out, _key(_GRAPH_INITIALIZER) + varint_bytes(size)) + _write(out, header)
        if payload is not None:
            written += copy_range(payload, out)
    return written


def write_external(model: ModelProto, out: BinaryIO, data: BinaryIO, location: str, base_dir: str | None,
                   threshold: int = 1024) -> int:
    """Write ``model`` to ``out`` with every main-graph initializer of ``threshold`` bytes or more (and every
    referenced one) in ``data`` (named ``location`` beside the model), payloads aligned; the data file's size."""
    graph = _graph_shell(model.graph)
    offset = 0
    for tensor in model.graph.initializer:
        found = source_range(tensor, base_dir)
        inline = len(tensor.raw_data) if found is None else 0
        if found is None and (inline < threshold or not tensor.HasField("raw_data")):  # typed fields stay inline
            graph.initializer.add().CopyFrom(tensor)
            continue
        offset += _write(data, b"\0" * (-offset % ALIGNMENT))
        start = offset
        if found is not None:
            offset += copy_range(found, data)
        else:
            offset += _write(data, memoryview(tensor.raw_data))
        header = graph.initializer.add()
        _copy_header(tensor, header)
        header.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(start)), ("length", str(offset - start))):
            header.external_data.append(StringStringEntryProto(key=key, value=value))
    result = _without_graph(model)
    result.graph.CopyFrom(graph)
    out.write(result.SerializeToString())
    return offset


def copy_range(source: Range, out: BinaryIO) -> int:
    """Copy ``source``'s bytes to ``out`` in chunks; raises ValueError when the file is shorter than the range."""
    done = 0
    with open(source.path, "rb") as f:
        f.seek(source.offset)
        for size in _chunks(source.length):
            block = f.read(size)
            if len(block) != size:
                raise ValueError(f"{source.path} is shorter than its tensors say (a tensor ends at "
                                 f"{source.offset + source.length} bytes)")
            out.write(block)
            done += size
    return done


def _inline_piece(tensor: TensorProto, found: Range | None) -> tuple[bytes, Range | None, int]:
    """(serialized header, the payload's range, the tensor field's length) of one initializer."""
    if found is None:
        data = tensor.SerializeToString()
        return data, None, len(data)
    header = TensorProto()
    _copy_header(tensor, header)
    header_bytes = header.SerializeToString() + _key(_TENSOR_RAW_DATA) + varint_bytes(found.length)
    return header_bytes, found, len(header_bytes) + found.length


def _copy_header(tensor: TensorProto, header: TensorProto) -> None:
    """Everything of ``tensor`` but its values and where they are (no payload is copied)."""
    header.name = tensor.name
    header.dims.extend(tensor.dims)
    header.data_type = tensor.data_type
    if tensor.doc_string:
        header.doc_string = tensor.doc_string
    if tensor.HasField("segment"):
        header.segment.CopyFrom(tensor.segment)
    header.metadata_props.extend(tensor.metadata_props)


def _graph_shell(source: GraphProto) -> GraphProto:
    """``source`` without its initializers (no initializer's payload is copied)."""
    return _copy_except(source, GraphProto(), "initializer")


def _without_graph(model: ModelProto) -> ModelProto:
    """``model`` without its graph (no payload is copied)."""
    return _copy_except(model, ModelProto(), "graph")


def _copy_except(source: Message, target: _M, skipped: str) -> _M:
    for descriptor, value in source.ListFields():
        if descriptor.name == skipped:
            continue
        if descriptor.is_repeated:
            getattr(target, descriptor.name).extend(value)
        elif descriptor.type == descriptor.TYPE_MESSAGE:
            getattr(target, descriptor.name).CopyFrom(value)
        else:
            setattr(target, descriptor.name, value)
    return target


def _chunks(length: int) -> Iterator[int]:
    while length > 0:
        size = min(CHUNK, length)
        yield size
        length -= size


def _write(out: BinaryIO, data: bytes | memoryview) -> int:
    out.write(data)
    return len(data)


def _field_length(size: int) -> int:
    return len(_key(_GRAPH_INITIALIZER)) + len(varint_bytes(size)) + size


def _key(field: int) -> bytes:
    return varint_bytes(field << 3 | LEN)




