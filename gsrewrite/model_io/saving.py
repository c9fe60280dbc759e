"""Atomic, non-destructive saving of models, with external data when needed.

Guarantees of :func:`save_model`: the target is replaced in one ``os.replace`` after the new content is
fully written (a failure leaves the old file untouched and no temp file behind; when a file is replaced,
its new content is fsynced first, so that a crash cannot leave it empty either — a new file is not: a crash
can lose only what did not exist before); the input
model is never overwritten unless asked; the IR version is lowered to what the installed onnxruntime reads;
everything else in the model (opsets, metadata, functions, value_info, doc strings, producer) is kept.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

import onnx
from google.protobuf.message import EncodeError
from onnx import ModelProto, TensorProto

from gsrewrite.errors import OutputError
from gsrewrite.model_io.graph_walk import iter_tensors, tensor_protos
from gsrewrite.model_io.ir_version import clamp_ir_version
from gsrewrite.model_io.tensors import declared_nbytes, is_external

log = logging.getLogger(__name__)

#: Largest serialized protobuf message; bigger models must keep their weights in an external file.
PROTOBUF_LIMIT = 2**31 - 1
_ALIGN_FROM = 1 << 20  # tensors of at least this many bytes start at a page boundary (mmap friendly)
_PAGE = 4096


def needs_external_data(model_nbytes: int, requested: bool | None) -> bool:
    """Whether to write tensors to an external file: as requested, or automatically above 2 GB."""
    if requested is None:
        return model_nbytes > PROTOBUF_LIMIT
    if not requested and model_nbytes > PROTOBUF_LIMIT:
        raise OutputError(
            f"the model needs {model_nbytes:,} bytes, above the 2 GB protobuf limit, so it must be saved "
            "with external data"
        )
    return requested


def save_model(
    model: ModelProto,
    path: str | os.PathLike[str],
    *,
    input_path: str | os.PathLike[str] | None = None,
    in_place: bool = False,
    external_data: bool | None = None,
    size_threshold: int = 1024,
    location: str | None = None,
    serialized: bytes | None = None,
) -> int:
    """Write ``model`` to ``path`` atomically; the caller's model object is not modified. Returns the number of
    bytes written (the model file plus its external data file, if any).

    Tensors of at least ``size_threshold`` bytes go to the external file ``location`` (default
    ``<file name>.data`` next to ``path``) when ``external_data`` is True, or automatically when the model
    is above the 2 GB protobuf limit and ``external_data`` is None. Raises OutputError when ``path`` is
    ``input_path`` (or the external file would overwrite the input's) and ``in_place`` is False, when the
    target folder does not exist, or when writing fails.

    ``serialized``: ``model`` already serialized, byte for byte (``SimplifyResult.serialized`` /
    ``RewriteResult.serialized``: the bytes validation ran); written as they are when neither external data
    nor an IR-version change asks for a new serialization. The caller vouches that they are ``model``'s.
    """
    target = check_output_path(path, input_path=input_path, in_place=in_place)
    if serialized is not None and writes_as_is(model, serialized, external_data):
        try:  # onnxruntime ran these bytes: every tensor is inline and the size is within the limit
            with _atomic_files() as create:
                create(target).write(serialized)
        except OSError as exc:
            raise OutputError(f"cannot write '{os.fspath(path)}': {exc.strerror or exc}") from exc
        log.debug("saved %s (IR %d, the serialized bytes given)", target, model.ir_version)
        return len(serialized)
    inline_bytes = _inline_tensor_bytes(model)
    too_big = _over_limit(model, inline_bytes, PROTOBUF_LIMIT)
    external = needs_external_data(serialized_size(model) if too_big else 0, external_data)
    data_path = _data_path(target, location, input_path, in_place) if external else None
    ir_version = clamp_ir_version(model.ir_version) if model.ir_version else model.ir_version
    out = model
    if data_path is not None or ir_version != model.ir_version:  # changed below: work on a copy
        out = ModelProto()
        out.CopyFrom(model)
        out.ir_version = ir_version
    try:
        with _atomic_files() as create:
            written = 0
            if data_path is not None:
                data_file = create(data_path)
                _move_tensors(out, data_file, os.path.basename(data_path), size_threshold)
                written = data_file.tell()
            payload = _serialized(out, target)
            create(target).write(payload)
    except OSError as exc:
        raise OutputError(f"cannot write '{os.fspath(path)}': {exc.strerror or exc}") from exc
    log.debug("saved %s (IR %d, external data: %s)", target, out.ir_version, data_path)
    return written + len(payload)


def writes_as_is(model: ModelProto, serialized: bytes, external_data: bool | None = None) -> bool:
    """Whether :func:`save_model` writes ``model``'s ``serialized`` bytes as they are: no external data asked
    for, within the protobuf limit, and an IR version the installed onnxruntime reads."""
    return not external_data and len(serialized) <= PROTOBUF_LIMIT \
        and clamp_ir_version(model.ir_version) == model.ir_version


def serialized_size(model: ModelProto) -> int:
    """The model's protobuf size; above the limit (protobuf cannot even count it) an estimate from tensors."""
    try:
        return model.ByteSize()
    except (EncodeError, ValueError):
        tensor_bytes = sum(declared_nbytes(t) for t in tensor_protos(model))
        return max(tensor_bytes, PROTOBUF_LIMIT + 1)


def stored_size(path: str | os.PathLike[str], model: ModelProto) -> int:
    """The bytes of the model read from ``path``, data included: the file's size, or the serialized size when
    the file is smaller than the tensors it holds (they were read from external data files)."""
    file_bytes = os.path.getsize(path)
    if sum(declared_nbytes(t) for t in tensor_protos(model)) > file_bytes:
        return serialized_size(model)
    return file_bytes


#: Room left for everything but tensor payloads (nodes, names, shapes) before protobuf must count exactly.
_STRUCTURE_MARGIN = 256 << 20


def over_protobuf_limit(model: ModelProto, limit: int | None = None) -> bool:
    """Whether ``model`` serializes to more than ``limit`` bytes.

    Cheap for the common case: the tensor payloads decide unless they come within 256 MB of the limit;
    only then does protobuf count the whole message (``ByteSize`` costs as much as serializing).
    """
    tensor_bytes = sum(declared_nbytes(t) for t in tensor_protos(model) if not is_external(t))
    return _over_limit(model, tensor_bytes, PROTOBUF_LIMIT if limit is None else limit)


def _over_limit(model: ModelProto, tensor_bytes: int, limit: int) -> bool:
    if tensor_bytes > limit:
        return True
    if tensor_bytes < limit - _STRUCTURE_MARGIN:
        return False
    return serialized_size(model) > limit


def check_output_path(
    path: str | os.PathLike[str],
    *,
    input_path: str | os.PathLike[str] | None = None,
    in_place: bool = False,
) -> str:
    """Check that ``path`` can be written (call it before long work); return its absolute path.

    Raises OutputError when the folder does not exist, ``path`` is a directory, or ``path`` is the same
    file as ``input_path`` and ``in_place`` is False. :func:`save_model` runs the same check.
    """
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise OutputError(f"cannot write '{os.fspath(path)}': folder '{folder}' does not exist")
    if os.path.isdir(target):
        raise OutputError(f"cannot write '{os.fspath(path)}': it is a directory")
    if input_path is not None and not in_place and _same_file(target, os.fspath(input_path)):
        raise OutputError(
            f"refusing to overwrite the input model '{os.fspath(path)}'; "
            "choose another output or use --in-place"
        )
    return target


def _same_file(a: str, b: str) -> bool:
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _inline_tensor_bytes(model: ModelProto) -> int:
    """The bytes of the model's tensor payloads; refuses tensors whose data was never loaded."""
    if not any(is_external(t) for t in tensor_protos(model)):
        return sum(declared_nbytes(t) for t in tensor_protos(model))
    total = 0
    for tensor, where in iter_tensors(model):
        if is_external(tensor):
            raise OutputError(
                f"{where} still refers to external data that was not loaded; "
                "load the model with load_external_data=True before saving it"
            )
        total += declared_nbytes(tensor)
    return total


def _data_path(
    target: str, location: str | None, input_path: str | os.PathLike[str] | None, in_place: bool
) -> str:
    name = location if location is not None else os.path.basename(target) + ".data"
    if name in ("", ".", "..") or os.path.basename(name) != name or "\\" in name or "/" in name:
        raise OutputError(f"external data location '{name}' must be a plain file name (no folders)")
    data_path = os.path.join(os.path.dirname(target), name)
    if _same_file(data_path, target):
        raise OutputError(f"external data location '{name}' is the model file itself")
    if input_path is not None and not in_place and _is_input_file(data_path, os.fspath(input_path)):
        raise OutputError(
            f"refusing to overwrite '{name}', which belongs to the input model; choose another location"
        )
    return data_path


def _is_input_file(data_path: str, input_path: str) -> bool:
    """True when ``data_path`` is the input model or one of the external files the input refers to."""
    if not os.path.exists(data_path):
        return False
    if _same_file(data_path, input_path):
        return True
    if os.path.dirname(os.path.realpath(data_path)) != os.path.dirname(os.path.realpath(input_path)):
        return False
    try:
        source = onnx.load(input_path, load_external_data=False)
    except Exception:  # an unreadable input refers to no file we could overwrite
        return False
    locations = {e.value for t in tensor_protos(source) for e in t.external_data if e.key == "location"}
    return os.path.basename(data_path) in {os.path.normpath(loc) for loc in locations}


def _move_tensors(model: ModelProto, f: BinaryIO, location: str, size_threshold: int) -> None:
    """Append every raw tensor of at least ``size_threshold`` bytes to ``f`` and point the tensor at it."""
    for tensor in tensor_protos(model):
        if not tensor.HasField("raw_data"):
            continue
        data = tensor.raw_data
        if len(data) < size_threshold:
            continue
        offset = f.tell()
        if len(data) >= _ALIGN_FROM and offset % _PAGE:
            f.write(b"\0" * (_PAGE - offset % _PAGE))
            offset = f.tell()
        f.write(data)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", offset), ("length", len(data))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)


def _serialized(model: ModelProto, target: str) -> bytes:
    try:
        return model.SerializeToString()
    except (EncodeError, ValueError) as exc:
        raise OutputError(f"cannot serialize the model for '{target}': {exc}") from exc


class PendingFile:
    """A temp file next to ``target`` (``.NAME.*.tmp``): written through :attr:`file`, then put in place by
    :meth:`commit` in one ``os.replace`` (fsynced first when it replaces an existing file) or removed by
    :meth:`discard`."""

    def __init__(self, target: str) -> None:
        folder, name = os.path.split(target)
        fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        self.target = target
        self.file: BinaryIO = os.fdopen(fd, "wb")

    def close(self, fsync: bool = False) -> None:
        if not self.file.closed:
            self.file.flush()
            if fsync:
                os.fsync(self.file.fileno())
            self.file.close()

    def commit(self) -> None:
        replacing = os.path.exists(self.target)
        self.close(fsync=replacing)
        _copy_mode(self.target, self.tmp)
        os.replace(self.tmp, self.target)
        if replacing:
            _fsync_dir(os.path.dirname(self.target))

    def discard(self) -> None:
        self.file.close()
        if os.path.exists(self.tmp):
            os.remove(self.tmp)


@contextmanager
def _atomic_files() -> Iterator[Callable[[str], BinaryIO]]:
    """Hand out temp files next to their targets; on success rename all (fsyncing those that replace an existing
    file first), on failure delete all."""
    pending: list[PendingFile] = []

    def create(target: str) -> BinaryIO:
        pending.append(PendingFile(target))
        return pending[-1].file

    try:
        yield create
        replacing = {p.target for p in pending if os.path.exists(p.target)}
        for p in pending:
            p.close(fsync=p.target in replacing)
        for p in pending:
            _copy_mode(p.target, p.tmp)
            os.replace(p.tmp, p.target)
        for folder in {os.path.dirname(target) for target in replacing}:
            _fsync_dir(folder)
    finally:
        for p in pending:
            p.discard()


def _copy_mode(target: str, tmp: str) -> None:
    """Give the new file the old file's permissions, or the usual ones for a new file (mkstemp uses 0600)."""
    if os.path.exists(target):
        mode = os.stat(target).st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.chmod(tmp, mode)


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
