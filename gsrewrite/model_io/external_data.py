"""Safe reading of external tensor data.

onnx stores large tensors outside the ``.onnx`` file: a tensor's ``external_data`` entries name a
``location`` (a path relative to the model's folder), an ``offset`` and a ``length``. A model file is
untrusted input, so every entry is validated before any byte is read: the location must be relative and
must resolve (symlinks included) to a regular file inside the model's folder, the byte range must lie
inside that file, and its length must match the tensor's declared shape and type.
"""

from __future__ import annotations

import functools
import mmap
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto

from gsrewrite.errors import ExternalDataError, ModelTooLargeError
from gsrewrite.model_io.graph_walk import iter_tensors, tensor_protos
from gsrewrite.model_io.tensors import checked_nbytes, dtype_name, is_external
from gsrewrite.model_io.wire import initializer_payloads

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
    files: dict[str, tuple[str, int]] = {}  # location -> (checked real path, size): checked once per file
    for tensor, where in iter_tensors(model):
        if is_external(tensor):
            if base_dir is None:
                raise ExternalDataError(f"{where} uses external data but no model folder is known")
            refs.append(_validated(tensor, where, base_dir, max_tensor_bytes, files))
    return refs


def _validated(tensor: TensorProto, where: str, base_dir: str, max_tensor_bytes: int,
               files: dict[str, tuple[str, int]]) -> ExternalRef:
    entries = _entries(tensor, where)
    location = entries.get("location", "")
    if location not in files:
        path = _safe_path(location, base_dir, where)
        files[location] = (path, os.path.getsize(path))
    path, size = files[location]
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
    """Bytes of memory available to this process right now, or None when it cannot be told: the smaller of the
    machine's available memory and the room left under the process's address-space limit (``ulimit -v``)."""
    known = [n for n in (_available_physical(), _address_space_headroom()) if n is not None]
    return min(known) if known else None


def _address_space_headroom() -> int | None:
    """RLIMIT_AS minus the address space in use (None without a limit, or off POSIX)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, ValueError, OSError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            used = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, ValueError, IndexError, StopIteration):
        used = 0
    return max(0, soft - used)


def _available_physical() -> int | None:
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


def data_files(model_path: str | os.PathLike[str]) -> frozenset[str]:
    """The real paths of the external-data files the model file at ``model_path`` refers to: every ``location``
    of any tensor (subgraphs and function bodies included), resolved as :func:`external_refs` resolves them
    (relative to the folder the path names, symlinks followed), whether or not they exist or are allowed.

    Empty for a model without external data and for a file that is missing or not a model. Cheap: a model
    whose bytes do not contain the key ``location`` is not parsed, and no tensor data is read; the answer
    is cached per file version (device, inode, size, mtime).
    """
    name = os.fspath(model_path)
    try:
        info = os.stat(name)
    except (OSError, ValueError):
        return frozenset()
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        return frozenset()
    folder = os.path.realpath(os.path.dirname(os.path.abspath(name)))
    return _data_files(name, folder, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))


@functools.lru_cache(maxsize=32)
def _data_files(name: str, folder: str, version: tuple[int, int, int, int]) -> frozenset[str]:
    found = set()
    for location in _locations(name):
        if location and "\0" not in location:
            found.add(os.path.realpath(os.path.join(folder, location)))
    return frozenset(found)


def _locations(name: str) -> set[str]:
    """Every external-data ``location`` value in the model file ``name`` (empty when it cannot be parsed)."""
    model = ModelProto()
    try:
        with open(name, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            if not _mentions_location(view):  # the key is stored verbatim in every external-data entry
                return set()
            with memoryview(view) as data:
                model.ParseFromString(data)
    except (OSError, ValueError, DecodeError, RuntimeError):
        return set()
    return {e.value for t in tensor_protos(model) for e in t.external_data if e.key == "location"}


def _mentions_location(view: mmap.mmap) -> bool:
    """Whether the bytes ``location`` occur in the file outside the ``raw_data`` payloads of the main graph's
    initializers (where an inline model's weights are: skipping them makes the search cost nothing for them)."""
    payloads = [found for found in initializer_payloads(view) or () if found is not None]  # malformed: none
    start = 0
    for begin, length in payloads:
        if view.find(b"location", start, begin) >= 0:
            return True
        start = begin + length
    return view.find(b"location", start) >= 0
