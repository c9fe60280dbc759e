"""Weights that stay in their files while a request works on the graph (issue 27: a weightless pipeline).

A model read with :func:`~gsrewrite.model_io.weightless.load_weightless` carries references instead of payloads:
ONNX external-data entries (location, offset, length) relative to the folder of the file it came from, pointing
into its ``.onnx`` file or its external data file. Three things need that folder: a pass that reads a weight's
values, onnxruntime (which maps the referenced bytes itself, given the folder), and the save (which copies each
payload from its file to the output in chunks). :func:`weights_from` binds the folder for the duration of one
request (the request's ``weights_dir``, :mod:`gsrewrite.request`: nothing process-wide, another request in
another thread sees its own);
:func:`weights_dir` is what the readers consult, :func:`tensor_values` reads one tensor.

A weight read here is read from disk into a new array each time unless it is small (the caller decides whether
to keep it): no second copy of every weight is ever made.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from gsrewrite.errors import InvalidModelError
from gsrewrite.model_io.graph_walk import tensor_protos
from gsrewrite.model_io.scratch import is_scratch, scratch_file
from gsrewrite.model_io.weightless import external_range
from gsrewrite.request import bound, current

#: element types stored two to a byte (their array is not the bytes reinterpreted)
_PACKED = frozenset(getattr(TensorProto, name) for name in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
                    if hasattr(TensorProto, name))


@contextlib.contextmanager
def weights_from(folder: str | os.PathLike[str] | None) -> Iterator[None]:
    """References read in this block (this thread and the contexts copied from it) are relative to ``folder``, and
    payloads the request makes go to a scratch file (:mod:`gsrewrite.model_io.scratch`); None leaves the bindings as
    they are."""
    if folder is None:
        yield
        return
    with bound(weights_dir=os.fspath(folder)), scratch_file():  # what the request makes waits there, not in
        yield  # memory (model_io/scratch.py)


def weights_dir() -> str | None:
    """The folder bound by :func:`weights_from`, if any."""
    return current().weights_dir


def is_reference(tensor: TensorProto) -> bool:
    """Whether ``tensor``'s payload lies in a file (external data or a weightless-loaded payload)."""
    return tensor.data_location == TensorProto.EXTERNAL


def has_references(model: ModelProto) -> bool:
    """Whether any tensor of ``model`` refers to a file for its payload."""
    return any(is_reference(t) for t in tensor_protos(model))


def tensor_values(tensor: TensorProto, folder: str | None = None) -> np.ndarray:
    """``tensor``'s values as an array; a reference is read from its file under ``folder`` (default: the bound
    :func:`weights_dir`) with one positioned read of exactly its bytes. Raises InvalidModelError for a reference
    with no folder to read it from, or whose file is shorter than the reference says."""
    if not is_reference(tensor):
        return numpy_helper.to_array(tensor)
    base = folder if folder is not None else current().weights_dir
    if base is None:
        raise InvalidModelError(f"tensor {tensor.name!r} refers to external data, and no model folder is known "
                                "to read it from")
    found = payload_range(tensor, base)
    if found is None:  # entries this reader does not handle (checksum, basepath, packed types): ONNX's reader does
        return numpy_helper.to_array(tensor, base)
    path, offset, length = found
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    count = length // dtype.itemsize if dtype.itemsize else 0
    with open(path, "rb") as f:
        f.seek(offset)
        array = np.fromfile(f, dtype=dtype.newbyteorder("<"), count=count)
    if array.nbytes != length:
        raise InvalidModelError(f"tensor {tensor.name!r}: {path} is shorter than its reference says")
    return array.astype(dtype, copy=False).reshape(tuple(tensor.dims))


def materialized(model: ModelProto, folder: str | None = None) -> ModelProto:
    """``model`` with every reference of its main graph's initializers read into the tensor (a copy; ``model`` is
    left as it is): for code that reads weights without knowing the model's folder. ``model`` itself when it
    holds no references."""
    if not any(is_reference(t) for t in model.graph.initializer):
        return model
    out = ModelProto()
    out.CopyFrom(model)
    for tensor in out.graph.initializer:
        if is_reference(tensor):
            values = tensor_values(tensor, folder)
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT
            tensor.raw_data = np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<"), copy=False).tobytes()
    return out


def inlined(model: ModelProto) -> ModelProto:
    """``model`` (changed in place) with every main-graph initializer that refers to the request's scratch file
    (:mod:`gsrewrite.model_io.scratch`) holding its bytes again: what a request made, handed back before the file
    goes away with the request."""
    for tensor in model.graph.initializer:
        if is_scratch(tensor):
            found = payload_range(tensor, "")
            assert found is not None
            data = read_range(*found)
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT
            tensor.raw_data = data
    return model


def payload_range(tensor: TensorProto, folder: str | None = None) -> tuple[str, int, int] | None:
    """(path, offset, length) of a reference's bytes under ``folder`` (default: the bound one); None for a tensor
    that holds its values, or a reference this module does not read itself."""
    base = folder if folder is not None else current().weights_dir
    if not is_reference(tensor) or base is None or tensor.data_type in _PACKED:
        return None
    found = external_range(tensor, base)
    return None if found is None else found[:3]


def read_range(path: str, offset: int, length: int) -> bytes:
    """``length`` bytes of ``path`` at ``offset`` (InvalidModelError when the file is shorter)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    if len(data) != length:
        raise InvalidModelError(f"{path} is shorter than its tensors say (a tensor ends at {offset + length} bytes)")
    return data


def same_bytes(a: tuple[str, int, int], b: tuple[str, int, int], chunk: int = 16 << 20) -> bool:
    """Whether two file ranges hold the same bytes, compared a chunk at a time."""
    if a == b:
        return True
    if a[2] != b[2]:
        return False
    for start in range(0, a[2], chunk):
        size = min(chunk, a[2] - start)
        if read_range(a[0], a[1] + start, size) != read_range(b[0], b[1] + start, size):
            return False
    return True
