"""Safe reading of external tensor data.

onnx stores large tensors outside the ``.onnx`` file: a tensor's ``external_data`` entries name a
``location`` (a path relative to the model's folder), an ``offset`` and a ``length``. A model file is
untrusted input, so every entry is validated before any byte is read: the location must be relative and
must resolve (symlinks included) to a regular file inside the model's folder, the byte range must lie
inside that file, and its length must match the tensor's declared shape and type.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

from onnx import ModelProto, TensorProto

from gsrewrite.errors import ExternalDataError, ModelTooLargeError
from gsrewrite.model_io.graph_walk import iter_tensors, tensor_protos
from gsrewrite.model_io.tensors import checked_nbytes, dtype_name, is_external

_KNOWN_KEYS = {"location", "offset", "length", "checksum", "basepath"}


@dataclass(frozen=True)
class ExternalRef:
    """One validated external-data entry: the tensor, and the exact byte range to read for it."""

    tensor: TensorProto
    where: str
    location: str
    path: str
    offset: int
    length: int


def external_refs(model: ModelProto, base_dir: str | None, max_tensor_bytes: int) -> list[ExternalRef]:
    """Validate every external-data entry of the model against files under ``base_dir``.

    Raises ExternalDataError (missing or unsafe location, range outside the file, length that does not
    match the tensor) or ModelTooLargeError. Reads nothing but file metadata.
    """
    if not any(is_external(tensor) for tensor in tensor_protos(model)):
        return []
    refs = []
    for tensor, where in iter_tensors(model):
        if is_external(tensor):
            if base_dir is None:
                raise ExternalDataError(f"{where} uses external data but no model folder is known")
            refs.append(_validated(tensor, where, base_dir, max_tensor_bytes))
    return refs


def _validated(tensor: TensorProto, where: str, base_dir: str, max_tensor_bytes: int) -> ExternalRef:
    entries = _entries(tensor, where)
    location = entries.get("location", "")
    path = _safe_path(location, base_dir, where)
    expected = checked_nbytes(tensor, where, max_tensor_bytes)
    if tensor.data_type == TensorProto.STRING:
        raise ExternalDataError(f"{where} is a STRING tensor, which cannot be stored as external data")
    offset = _non_negative_int(entries, "offset", 0, where)
    length = _non_negative_int(entries, "length", expected, where)
    if length != expected:
        raise ExternalDataError(
            f"{where} has {length:,} bytes of external data in '{location}' but its shape "
            f"{list(tensor.dims)} of {dtype_name(tensor.data_type)} needs {expected:,}"
        )
    size = os.path.getsize(path)
    if offset + length > size:
        raise ExternalDataError(
            f"{where} reads bytes {offset:,}..{offset + length:,} of '{location}', "
            f"which has only {size:,} bytes"
        )
    return ExternalRef(tensor, where, location, path, offset, length)


def _entries(tensor: TensorProto, where: str) -> dict[str, str]:
    entries = {e.key: e.value for e in tensor.external_data}
    unknown = sorted(set(entries) - _KNOWN_KEYS)
    if unknown:
        raise ExternalDataError(f"{where} has an unknown external-data key '{unknown[0]}'")
    return entries


def _non_negative_int(entries: dict[str, str], key: str, default: int, where: str) -> int:
    text = entries.get(key)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ExternalDataError(f"{where} has an invalid external-data {key} '{text}'")
    return value


def _safe_path(location: str, base_dir: str, where: str) -> str:
    """The real path of ``location``, which must stay inside ``base_dir`` and be a regular file."""
    if not location:
        raise ExternalDataError(f"{where} uses external data but gives no location")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or os.path.splitdrive(location)[0]:
        raise ExternalDataError(f"{where} has an absolute external-data location '{location}'")
    if "\0" in location:
        raise ExternalDataError(f"{where} has an external-data location containing a NUL byte")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise ExternalDataError(
            f"{where} has external-data location '{location}', which resolves outside the model folder"
        )
    if not os.path.exists(path):
        raise ExternalDataError(f"{where} refers to external data file '{location}', which does not exist")
    if not os.path.isfile(path):
        raise ExternalDataError(f"{where} refers to external data '{location}', which is not a regular file")
    return path


def read_external_data(refs: Iterable[ExternalRef]) -> None:
    """Read each validated range into its tensor (as ``raw_data``) and drop the external reference.

    Checks first that the total fits in the memory currently available (ModelTooLargeError otherwise).
    """
    refs = list(refs)
    _check_memory(sum(r.length for r in refs))
    by_path: dict[str, list[ExternalRef]] = {}
    for ref in refs:
        by_path.setdefault(ref.path, []).append(ref)
    for path, group in by_path.items():
        try:
            with open(path, "rb") as f:
                for ref in sorted(group, key=lambda r: r.offset):
                    _read_one(f, ref)
        except OSError as exc:
            raise ExternalDataError(
                f"cannot read external data file '{group[0].location}': {exc.strerror}"
            ) from exc


def _read_one(f: BinaryIO, ref: ExternalRef) -> None:
    f.seek(ref.offset)
    data = f.read(ref.length)
    if len(data) != ref.length:
        raise ExternalDataError(
            f"{ref.where}: external data file '{ref.location}' ended early (changed while reading?)"
        )
    ref.tensor.raw_data = data
    del ref.tensor.external_data[:]
    ref.tensor.ClearField("data_location")


def _check_memory(total: int) -> None:
    available = available_memory()
    if available is not None and total > available:
        raise ModelTooLargeError(
            f"the model's external data needs {total:,} bytes "
            f"but only {available:,} bytes of memory are available"
        )


def available_memory() -> int | None:
    """Bytes of memory available to this process right now, or None when it cannot be told."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
