"""Reading the protobuf wire format of a serialized ModelProto without parsing it: the few fields a loader needs
(where each initializer's ``raw_data`` lies) found by their headers, payloads skipped. One reader for the
loader (payload lengths), the weightless loader (payloads left in the file) and the external-data check
(where not to search); every malformed input raises ValueError or IndexError, which callers treat as "not laid
out as expected" and fall back to parsing.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator

#: wire types
VARINT, I64, LEN, I32 = 0, 1, 2, 5
#: field numbers in onnx.proto: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data
MODEL_GRAPH, GRAPH_INITIALIZER, TENSOR_RAW_DATA = 7, 5, 9

Buffer = mmap.mmap | bytes | memoryview


def varint(view: Buffer, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = view[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def varint_bytes(value: int) -> bytes:
    """``value`` (>= 0) encoded as a protobuf varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def all_fields(view: Buffer, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, payload start, field end) of every field in ``view[pos:end]``."""
    while pos < end:
        start = pos
        tag, pos = varint(view, pos)
        wire = tag & 7
        payload = pos
        if wire == VARINT:
            _, pos = varint(view, pos)
        elif wire == I64:
            pos += 8
        elif wire == I32:
            pos += 4
        elif wire == LEN:
            size, payload = varint(view, pos)
            pos = payload + size
        else:
            raise ValueError(f"unexpected wire type {wire}")
        if pos > end:
            raise ValueError("field past the end of its message")
        yield tag >> 3, wire, start, payload, pos


def initializer_payloads(data: Buffer) -> list[tuple[int, int] | None] | None:
    """For each main-graph initializer of the serialized model ``data``, in order, where its ``raw_data``
    payload is in ``data`` (offset, length), or None for one without; None when ``data`` is not laid out as one
    graph field (the reader then copies the tensors instead)."""
    try:
        graphs = [(payload, end) for field, wire, _, payload, end in all_fields(data, 0, len(data))
                  if field == MODEL_GRAPH and wire == LEN]
        if len(graphs) != 1:
            return None
        out: list[tuple[int, int] | None] = []
        for field, wire, _, payload, end in all_fields(data, *graphs[0]):
            if field == GRAPH_INITIALIZER and wire == LEN:
                found = None
                for inner, inner_wire, _, start, stop in all_fields(data, payload, end):
                    if inner == TENSOR_RAW_DATA and inner_wire == LEN:
                        found = (start, stop - start)  # the last one counts, as when parsing
                out.append(found)
        return out
    except (IndexError, ValueError):
        return None
