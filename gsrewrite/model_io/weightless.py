"""Loading a model without its weights: for the commands that only need the graph and the tensors' shapes
(``profile``, ``shapes``, ``memory``) on models of any size.

The file is memory-mapped and read in the protobuf wire format: every ``raw_data`` payload of a main-graph
initializer larger than :data:`INLINE_LIMIT` is left out, and the tensor instead refers to its own bytes *in the
model file* with ONNX's external-data entries (``location`` = the model file, ``offset``, ``length``). The
result is then checked exactly like :func:`gsrewrite.model_io.load_model` (text, tensor declarations,
external-data entries, structure) without reading any weight; a reader that wants a weight's values reads that
byte range (:func:`external_range`), as it would for a real external-data file. The payloads are never copied:
a 7 GB model costs its graph, not 7 GB.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto, helper

from gsrewrite.errors import InvalidModelError
from gsrewrite.model_io.loading import _checked_model, _mapped_file
from gsrewrite.model_io.scratch import resolve as resolve_scratch
from gsrewrite.model_io.tensors import declared_nbytes
from gsrewrite.model_io.wire import (
    GRAPH_INITIALIZER,
    LEN,
    MODEL_GRAPH,
    TENSOR_RAW_DATA,
    VARINT,
    Buffer,
    all_fields,
    varint_bytes,
)

#: payloads up to this many bytes stay inline (small constants: shape arithmetic reads their values)
INLINE_LIMIT = 4096

_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 1, 2, 13, 14


def load_weightless(path: str | os.PathLike[str], *, max_tensor_bytes: int | None = None) -> ModelProto:
    """The model at ``path`` with its large inline weights left in the file (see the module docstring)."""
    name = os.fspath(path)
    base_dir = os.path.dirname(os.path.abspath(name))
    location = os.path.basename(name)
    with _mapped_file(name) as view:  # the file's bytes in place (read, where it cannot be mapped)
        try:
            data = bytes(_rebuilt(view, location)) if view else b""
        except (IndexError, ValueError):  # not well-formed: the full loader says what is wrong
            return _checked_model(view, name, base_dir, False, max_tensor_bytes)
    return _checked_model(data, name, base_dir, False, max_tensor_bytes)


def _rebuilt(view: Buffer, location: str) -> bytearray:
    out = bytearray()
    for field, wire, start, payload, end in all_fields(view, 0, len(view)):
        if field == MODEL_GRAPH and wire == LEN:
            _put_len(out, field, _graph(view, payload, end, location))
        else:
            out += view[start:end]
    return out


def _graph(view: Buffer, pos: int, end: int, location: str) -> bytearray:
    out = bytearray()
    kept = pos  # the fields from here on are copied as they are, in one run (a graph is mostly nodes)
    for field, wire, start, payload, stop in all_fields(view, pos, end):
        if field == GRAPH_INITIALIZER and wire == LEN:
            out += view[kept:start]
            _put_len(out, field, _tensor(view, payload, stop, location))
            kept = stop
    out += view[kept:end]
    return out


def _tensor(view: Buffer, pos: int, end: int, location: str) -> bytearray:
    """The tensor's fields with a large ``raw_data`` payload replaced by a reference to it in the file. Raises
    ValueError (the caller then parses the whole file, whose checks name the problem as the file has it) for a
    tensor this cannot restate faithfully: a payload whose length differs from the declared shape and type
    (refused as raw_data, not as external data), a second raw_data field, raw_data beside external data."""
    out = bytearray()
    moved: tuple[int, int] | None = None
    declared = TensorProto()  # the type and dims alone, to size the payload
    for field, wire, start, payload, stop in all_fields(view, pos, end):
        if field == TENSOR_RAW_DATA and wire == LEN and stop - payload > INLINE_LIMIT and moved is None:
            moved = (payload, stop - payload)
        elif field in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION, TENSOR_RAW_DATA) and moved is not None:
            raise ValueError("a tensor with raw_data twice or with raw_data and external data")
        else:
            if field in (_TENSOR_DIMS, _TENSOR_DATA_TYPE):
                declared.MergeFromString(bytes(view[start:stop]))
            out += view[start:stop]
    if moved is not None:
        offset, length = moved
        try:
            size = declared_nbytes(declared)
        except (KeyError, ValueError, TypeError):  # a type without a size: the loader's checks refuse it
            size = length
        if size != length:
            raise ValueError("a raw_data payload of another length than the tensor declares")
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
            _put_len(out, _TENSOR_EXTERNAL_DATA, _entry(key, value))
        out += _tag(_TENSOR_DATA_LOCATION, VARINT) + varint_bytes(TensorProto.EXTERNAL)
    return out


def _entry(key: str, value: str) -> bytes:
    """A StringStringEntryProto: key = field 1, value = field 2."""
    out = bytearray()
    _put_len(out, 1, key.encode())
    _put_len(out, 2, value.encode())
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return varint_bytes(field << 3 | wire)


def _put_len(out: bytearray, field: int, payload: bytes | bytearray) -> None:
    out += _tag(field, LEN)
    out += varint_bytes(len(payload))
    out += payload




@functools.lru_cache(maxsize=256)
def _real(path: str) -> str:
    return os.path.realpath(path)


def external_range(tensor: TensorProto, base_dir: str) -> tuple[str, int, int, np.dtype[Any]] | None:
    """(real path, offset, length, dtype) of an external (or weightless-loaded) tensor's bytes; None when its
    entries are not a plain location/offset/length or its type has no numpy dtype. A location outside
    ``base_dir`` raises InvalidModelError."""
    entries = {e.key: e.value for e in tensor.external_data}
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        offset, length = int(entries.get("offset", "0")), int(entries["length"])
        scratch = resolve_scratch(entries["location"])  # a payload the request made (model_io/scratch.py)
        if scratch is not None:
            return scratch, offset, length, dtype
        path = _real(os.path.join(base_dir, entries["location"]))
    except (KeyError, ValueError, TypeError):
        return None
    root = _real(base_dir)
    if os.path.commonpath([root, path]) != root:
        raise InvalidModelError(f"tensor {tensor.name!r}: external data outside the model folder")
    return path, offset, length, dtype

