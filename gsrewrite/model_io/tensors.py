"""Tensor sanity checks: declared sizes (before anything is allocated) and data/shape consistency.

A tensor declares its element type and shape; its payload lives in ``raw_data``, in one typed field
(``float_data``, ``int32_data``, ...), or in an external file. A tensor whose payload length disagrees
with its declaration would make numpy (or onnxruntime) read out of bounds or fail far away from the
cause, and a tensor that declares a huge shape would make a later ``to_array`` allocate it; both are
refused here with a message naming the tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from onnx import ModelProto, TensorProto, helper

from gsrewrite.errors import InvalidModelError, ModelError, ModelTooLargeError
from gsrewrite.model_io.graph_walk import iter_tensors, tensor_protos

#: Largest single tensor (in bytes) load_model accepts unless told otherwise.
DEFAULT_MAX_TENSOR_BYTES = 16 * 2**30

_T = TensorProto
#: Element types stored with fewer than 8 bits per element in raw_data (bits per element).
_SUB_BYTE_BITS: dict[int, int] = {
    _T.INT4: 4, _T.UINT4: 4, _T.FLOAT4E2M1: 4,
    _T.INT2: 2, _T.UINT2: 2,
    _T.FLOAT6E2M3: 6, _T.FLOAT6E3M2: 6,
}  # fmt: skip
#: Sub-byte types whose typed field (int32_data) holds packed bytes rather than one entry per element.
_PACKED_IN_TYPED_FIELD: set[int] = {_T.INT4, _T.UINT4, _T.FLOAT4E2M1, _T.INT2, _T.UINT2}
_COMPLEX = {_T.COMPLEX64, _T.COMPLEX128}


def dtype_name(data_type: int) -> str:
    """The TensorProto.DataType name (``FLOAT``), or ``type <n>`` for an unknown code."""
    try:
        return TensorProto.DataType.Name(data_type)
    except ValueError:
        return f"type {data_type}"


def element_count(tensor: TensorProto) -> int:
    """Number of elements the tensor declares (1 for a scalar); exact, never overflows."""
    return math.prod(tensor.dims)


def declared_nbytes(tensor: TensorProto) -> int:
    """Bytes the declared shape and type need in raw form (strings: the bytes actually stored)."""
    if tensor.data_type == _T.STRING:
        return sum(len(s) for s in tensor.string_data)
    count = element_count(tensor)
    bits = _SUB_BYTE_BITS.get(tensor.data_type)
    if bits is not None:
        return math.ceil(count * bits / 8)
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def initializer_bytes(model: ModelProto) -> int:
    """The declared bytes of the main graph's initializers, referenced ones included (a type without a size
    counts 0): the weight bytes memory figures are measured against."""
    total = 0
    for tensor in model.graph.initializer:
        try:
            total += declared_nbytes(tensor)
        except (KeyError, ValueError, TypeError):
            continue
    return total


_KNOWN_TYPES = frozenset(TensorProto.DataType.values())


def checked_nbytes(tensor: TensorProto, where: str, max_bytes: int) -> int:
    """Validate the tensor's declaration (type, dimensions, size cap) and return its size in bytes.

    Raises InvalidModelError for an unknown element type or a negative dimension, ModelTooLargeError when
    the declared size exceeds ``max_bytes``. Nothing is allocated.
    """
    if tensor.data_type == _T.UNDEFINED or tensor.data_type not in _KNOWN_TYPES:
        raise InvalidModelError(f"{where} has an unknown element type ({dtype_name(tensor.data_type)})")
    negative = [d for d in tensor.dims if d < 0]
    if negative:
        raise InvalidModelError(
            f"{where} has a negative dimension {negative[0]} in shape {list(tensor.dims)}"
        )
    nbytes = declared_nbytes(tensor)
    if nbytes > max_bytes:
        raise ModelTooLargeError(
            f"{where} declares shape {list(tensor.dims)} of {dtype_name(tensor.data_type)} "
            f"({nbytes:,} bytes), above the limit of {max_bytes:,} bytes"
        )
    return nbytes


def is_external(tensor: TensorProto) -> bool:
    """True when the tensor's payload lives in an external file."""
    return tensor.HasField("data_location") and tensor.data_location == _T.EXTERNAL


def check_tensor_data(tensor: TensorProto, where: str) -> None:
    """Raise InvalidModelError when the stored payload does not match the declared shape and type."""
    if tensor.data_type == _T.STRING:
        _check_count(where, tensor, "string_data", len(tensor.string_data), element_count(tensor))
        return
    if tensor.HasField("raw_data"):
        _check_count(where, tensor, "raw_data", len(tensor.raw_data), declared_nbytes(tensor), "bytes")
        return
    field = helper.tensor_dtype_to_field(tensor.data_type)
    _check_count(where, tensor, field, len(getattr(tensor, field)), _typed_entries(tensor))


def _typed_entries(tensor: TensorProto) -> int:
    count = element_count(tensor)
    if tensor.data_type in _PACKED_IN_TYPED_FIELD:
        return math.ceil(count * _SUB_BYTE_BITS[tensor.data_type] / 8)
    if tensor.data_type in _COMPLEX:
        return 2 * count
    return count


def _check_count(
    where: str, tensor: TensorProto, field: str, found: int, expected: int, unit: str = "values"
) -> None:
    if found != expected:
        raise InvalidModelError(
            f"{where} has {found:,} {unit} in {field} but its shape {list(tensor.dims)} of "
            f"{dtype_name(tensor.data_type)} needs {expected:,}"
        )


def _itemsizes() -> dict[int, int]:
    sizes = {}
    for code in _KNOWN_TYPES - set(_SUB_BYTE_BITS) - {_T.UNDEFINED, _T.STRING}:
        try:
            sizes[code] = helper.tensor_dtype_to_np_dtype(code).itemsize
        except (KeyError, ValueError, TypeError):  # a type this onnx release cannot map: the full checks decide
            continue
    return sizes


#: Bytes per element of the types stored whole bytes per element in raw_data (what declared_nbytes computes).
_ITEMSIZES = _itemsizes()


def _sound_raw_tensor(tensor: TensorProto, cap: int, raw_length: int | None = None) -> bool:
    """True for an inline raw_data tensor of a whole-byte type whose payload matches its declaration within the
    cap (the checks of checked_nbytes and check_tensor_data, without their function calls); False otherwise.
    ``raw_length``: the payload's length when known from the serialized bytes (``len(tensor.raw_data)`` copies
    the payload: benchmarks/results/code_figures.md)."""
    itemsize = _ITEMSIZES.get(tensor.data_type)
    if itemsize is None or not tensor.HasField("raw_data") or is_external(tensor):
        return False
    dims = tensor.dims
    if dims and min(dims) < 0:
        return False
    nbytes = math.prod(dims) * itemsize
    return nbytes <= cap and (len(tensor.raw_data) if raw_length is None else raw_length) == nbytes


def check_tensors(model: ModelProto, *, max_tensor_bytes: int | None = None,
                  payloads: Sequence[tuple[int, int] | None] | None = None) -> None:
    """Check every tensor in the model: type, dimensions and size cap; payload length for inline tensors.

    External tensors are checked for their declaration only; their payload is checked against the
    external file by :mod:`gsrewrite.model_io.external_data`. ``payloads``: where each main-graph initializer's
    ``raw_data`` lies in the serialized model (:func:`gsrewrite.model_io.wire.initializer_payloads`), so
    their lengths are read without copying them.
    """
    cap = DEFAULT_MAX_TENSOR_BYTES if max_tensor_bytes is None else max_tensor_bytes
    known = payloads if payloads is not None and len(payloads) == len(model.graph.initializer) else ()
    try:  # the common case, every tensor sound: no description is formatted
        for index, tensor in enumerate(tensor_protos(model)):  # the main graph's initializers come first
            payload = known[index] if index < len(known) else None
            if not _sound_raw_tensor(tensor, cap, payload[1] if payload is not None else None):
                # the other kinds (and any problem) take the full checks
                checked_nbytes(tensor, "", cap)
                if not is_external(tensor):
                    check_tensor_data(tensor, "")
        return
    except ModelError:
        pass
    for tensor, where in iter_tensors(model):  # again, to raise for the first bad tensor with its description
        checked_nbytes(tensor, where, cap)
        if not is_external(tensor):
            check_tensor_data(tensor, where)
