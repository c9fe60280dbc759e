"""Atomic, non-destructive saving of models, with external data when needed.

Guarantees of :func:`save_model`: the target is replaced in one ``os.replace`` after the new content is fully
written (a failure or an interrupt leaves the old file untouched and no temp file behind; a temp file left by a
killed process is removed by the next save into its folder; when a file is replaced, its new content is fsynced
first, so that a crash cannot leave it empty either — a new file is not: a crash can lose only what did not exist
before); no file the input model reads is overwritten (the model itself only when asked), nor an existing file as
external data unless it is the output's own; the IR version is lowered to what the installed onnxruntime reads;
everything else in the model (opsets, metadata, functions, value_info, doc strings, producer) is kept.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import BinaryIO

from google.protobuf.message import EncodeError
from onnx import ModelProto, TensorProto

try:
    import fcntl
except ImportError:  # not on POSIX: temp files are not locked, the pid alone tells a leftover
    fcntl = None  # type: ignore[assignment]

from gsrewrite.errors import OutputError
from gsrewrite.model_io.disk_space import is_full, no_space
from gsrewrite.model_io.external_data import data_files
from gsrewrite.model_io.graph_walk import iter_tensors, tensor_protos
from gsrewrite.model_io.ir_version import clamp_ir_version
from gsrewrite.model_io.tensors import declared_nbytes, is_external
from gsrewrite.model_io.weights import has_references
from gsrewrite.model_io.weights import weights_dir as bound_weights_dir
from gsrewrite.stages import stage

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
    weights_dir: str | None = None,
) -> int:
    """Write ``model`` to ``path`` atomically; the caller's model object is not modified. Returns the number of
    bytes written (the model file plus its external data file, if any).

    Tensors of at least ``size_threshold`` bytes go to the external file ``location`` (default
    ``<file name>.data`` next to ``path``) when ``external_data`` is True, or automatically when the model
    is above the 2 GB protobuf limit and ``external_data`` is None. Raises OutputError, before writing
    anything, when ``path`` or the data file is a file the input (``input_path``) reads (see
    :func:`check_output_path` and :func:`check_data_path`; ``in_place`` allows the input model and its own
    data file), when the data file would replace an existing file that is not the output's own, when the
    target folder does not exist; and when writing fails or the save is cancelled (:func:`cancel_saves`).

    ``serialized``: ``model`` already serialized, byte for byte (``SimplifyResult.serialized`` /
    ``RewriteResult.serialized``: the bytes validation ran); written as they are when neither external data
    nor an IR-version change asks for a new serialization. The caller vouches that they are ``model``'s.

    ``weights_dir``: the folder ``model``'s weight references are relative to (a model read weightless, see
    :mod:`gsrewrite.model_io.weights`; default: the folder bound for the request): each payload is copied from
    its file to the output in chunks, never held in memory whole.
    """
    target = check_output_path(path, input_path=input_path, in_place=in_place)
    folder = weights_dir if weights_dir is not None else bound_weights_dir()
    if folder is not None and has_references(model):
        return _save_streamed(model, target, folder, external_data, location, size_threshold,
                              input_path=input_path, in_place=in_place)
    if serialized is not None and writes_as_is(model, serialized, external_data):
        try:  # onnxruntime ran these bytes: every tensor is inline and the size is within the limit
            with atomic_files() as create:
                create(target).write(serialized)
        except OSError as exc:
            raise write_error(exc, os.fspath(path)) from exc
        log.debug("saved %s (IR %d, the serialized bytes given)", target, model.ir_version)
        return len(serialized)
    inline_bytes = _inline_tensor_bytes(model)
    too_big = _over_limit(model, inline_bytes, PROTOBUF_LIMIT)
    external = needs_external_data(serialized_size(model) if too_big else 0, external_data)
    data_path = check_data_path(target, location, input_path=input_path, in_place=in_place) if external else None
    ir_version = clamp_ir_version(model.ir_version) if model.ir_version else model.ir_version
    out = model
    if data_path is not None or ir_version != model.ir_version:  # changed below: work on a copy
        out = ModelProto()
        out.CopyFrom(model)
        out.ir_version = ir_version
    try:
        with atomic_files() as create:
            written = 0
            if data_path is not None:
                data_file = create(data_path)
                _move_tensors(out, data_file, os.path.basename(data_path), size_threshold)
                written = data_file.tell()
            payload = _serialized(out, target)
            create(target).write(payload)
    except OSError as exc:
        raise write_error(exc, os.fspath(path)) from exc
    log.debug("saved %s (IR %d, external data: %s)", target, out.ir_version, data_path)
    return written + len(payload)


def _save_streamed(model: ModelProto, target: str, folder: str, external_data: bool | None, location: str | None,
                   size_threshold: int, *, input_path: str | os.PathLike[str] | None, in_place: bool) -> int:
    """:func:`save_model` of a model whose weights are references into files under ``folder``."""
    from gsrewrite.model_io.streamed import write_external, write_inline

    total = model.ByteSize() + sum(declared_nbytes(t) for t in model.graph.initializer if is_external(t))
    external = needs_external_data(total, external_data)
    data_path = check_data_path(target, location, input_path=input_path, in_place=in_place) if external else None
    out = model
    ir_version = clamp_ir_version(model.ir_version) if model.ir_version else model.ir_version
    if ir_version != model.ir_version:  # a copy of the graph and its references: no payload
        out = ModelProto()
        out.CopyFrom(model)
        out.ir_version = ir_version
    try:
        with stage("saving"), atomic_files() as create:
            model_file = create(target)
            if data_path is not None:
                written = write_external(out, model_file, create(data_path), os.path.basename(data_path), folder,
                                         size_threshold)
                written += model_file.tell()
            else:
                written = write_inline(out, model_file, folder)
    except (OSError, ValueError) as exc:
        raise write_error(exc, target) from exc
    log.debug("saved %s (IR %d, weights copied from %s, external data: %s)", target, out.ir_version, folder,
              data_path)
    return written


def write_error(exc: BaseException, path: str) -> OutputError:
    """The error of a failed write of ``path`` (and of the temp files next to it): :class:`NoSpaceError` naming
    the folder when it is full (or the disk quota or the file size limit is reached), else an OutputError."""
    if is_full(exc):
        assert isinstance(exc, OSError)
        return no_space(exc, f"'{os.path.basename(path)}'", os.path.dirname(path) or ".")
    return OutputError(f"cannot write '{path}': {getattr(exc, 'strerror', None) or exc}")


def writes_as_is(model: ModelProto, serialized: bytes, external_data: bool | None = None) -> bool:
    """Whether :func:`save_model` writes ``model``'s ``serialized`` bytes as they are: no external data asked
    for, within the protobuf limit, and an IR version the installed onnxruntime reads."""
    return not external_data and len(serialized) <= PROTOBUF_LIMIT \
        and clamp_ir_version(model.ir_version) == model.ir_version and not has_references(model)


def serialized_size(model: ModelProto) -> int:
    """The model's protobuf size; above the limit (protobuf cannot even count it) an estimate from tensors."""
    try:
        return model.ByteSize() + sum(declared_nbytes(t) for t in tensor_protos(model) if is_external(t))
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
    external_data: bool | None = None,
    location: str | None = None,
) -> str:
    """Check that ``path`` can be written (call it before long work); return its absolute path.

    Raises OutputError when the folder does not exist, ``path`` is a directory, ``path`` is the input model
    (``input_path``) and ``in_place`` is False, or ``path`` is a file the input reads its external data from
    (even with ``in_place``). With ``external_data=True`` the data file (``location``) is checked too, see
    :func:`check_data_path`. :func:`save_model` runs the same checks.
    """
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise OutputError(f"cannot write '{os.fspath(path)}': folder '{folder}' does not exist")
    if os.path.isdir(target):
        raise OutputError(f"cannot write '{os.fspath(path)}': it is a directory")
    if input_path is not None:
        _check_not_input(target, os.fspath(path), os.fspath(input_path), in_place)
    if external_data:
        check_data_path(target, location, input_path=input_path, in_place=in_place)
    return target


def check_distinct_outputs(outputs: Sequence[tuple[str, str | os.PathLike[str]]]) -> None:
    """Raise OutputError when two outputs of one command are one file (the same path however spelled, or links
    to one file): one would be written over the other. ``outputs``: (what it is, path) pairs, e.g.
    ``("the shape engine (--shape-engine)", path)``; every command writing more than one file checks them here
    before any work."""
    seen: dict[object, str] = {}
    for what, path in outputs:
        key = _file_key(os.fspath(path))
        if key in seen:
            raise OutputError(f"{seen[key]} and {what} would both be written to '{os.fspath(path)}': give each "
                              "output its own path")
        seen[key] = what


def _file_key(path: str) -> object:
    """What identifies the file ``path`` names: its device and inode when it exists, else its resolved path."""
    try:
        info = os.stat(path)
        return ("file", info.st_dev, info.st_ino)
    except (OSError, ValueError):
        return ("path", os.path.realpath(path))


def check_not_read(output: str | os.PathLike[str], read: Sequence[tuple[str, str | os.PathLike[str] | None]]) -> None:
    """Raise OutputError when ``output`` is one of the files a command reads besides its model (``read``: (what
    the user calls it, path) pairs, e.g. ``("--input-data", "d.npz")``); checked before any work."""
    for what, path in read:
        if path is not None and _same_file(os.fspath(output), os.fspath(path)):
            raise OutputError(f"refusing to overwrite '{os.fspath(output)}': it is the {what} file this command "
                              "reads; choose another output")


def _check_not_input(target: str, shown: str, input_path: str, in_place: bool) -> None:
    if _same_file(target, input_path):
        if not in_place:
            raise OutputError(
                f"refusing to overwrite the input model '{shown}'; choose another output or use --in-place"
            )
        return
    if _reads(input_path, target):
        raise OutputError(
            f"refusing to overwrite '{shown}': the input model reads its external data from it; "
            "choose another output"
        )


def _reads(model_path: str, path: str) -> bool:
    """Whether the model file ``model_path`` refers to ``path`` as one of its external-data files."""
    return any(_same_file(path, data_file) for data_file in data_files(model_path))


def check_data_path(
    target: str | os.PathLike[str],
    location: str | None = None,
    *,
    input_path: str | os.PathLike[str] | None = None,
    in_place: bool = False,
) -> str:
    """The external data file for the model file ``target`` (``location``, default ``<file name>.data``, in
    the target's folder); raise OutputError when writing it could destroy a file this save does not own.

    Refused: a location that is not a plain file name, the model file itself, the input model, a file the
    input reads external data from (except with ``in_place`` when ``target`` is the input: the input's own
    data file is then the output's), and any other existing file unless the model file now at ``target``
    refers to it (the output's own previous data file, replaced with it).
    """
    target = os.path.abspath(os.fspath(target))
    name = location if location is not None else os.path.basename(target) + ".data"
    if name in ("", ".", "..") or os.path.basename(name) != name or "\\" in name or "/" in name:
        raise OutputError(f"external data location '{name}' must be a plain file name (no folders)")
    data_path = os.path.join(os.path.dirname(target), name)
    if _same_file(data_path, target):
        raise OutputError(f"external data location '{name}' is the model file itself")
    if input_path is not None:
        source = os.fspath(input_path)
        if _same_file(data_path, source):
            raise OutputError(f"refusing to overwrite '{data_path}', which is the input model; choose another output")
        if _reads(source, data_path) and not (in_place and _same_file(target, source)):
            raise OutputError(
                f"refusing to overwrite '{data_path}', which belongs to the input model (it reads its external "
                "data from it); choose another output"
            )
    if os.path.lexists(data_path) and not _reads(target, data_path):
        raise OutputError(
            f"refusing to overwrite '{data_path}' with the external data of '{target}': the file exists and "
            f"is not the data file of '{os.path.basename(target)}'; remove it or choose another output"
        )
    return data_path


def _same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are one file (hard links and symlinks included) or, when one does not exist
    yet, resolve to the same path."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
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


def _move_tensors(model: ModelProto, f: BinaryIO, location: str, size_threshold: int) -> None:
    """Append every raw tensor of at least ``size_threshold`` bytes to ``f`` and point the tensor at it."""
    for tensor in tensor_protos(model):
        if not tensor.HasField("raw_data"):
            continue
        data = tensor.raw_data
        if len(data) < size_threshold:
            continue
        _check_cancelled()  # an interrupted save stops writing gigabytes
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
    """A temp file next to ``target``, written through :attr:`file`, then put in place by :meth:`commit` in one
    ``os.replace`` (fsynced first when it replaces an existing file) or removed by :meth:`discard`.

    It is named ``.<target name>.gsrewrite-<pid>-<random>.tmp`` and locked (``flock``) until it is put in place
    or removed, so that a later run can tell it from the leftover of a killed process (see
    :func:`remove_stale_temp_files`, run once per folder and process before the first temp file there).
    """

    def __init__(self, target: str) -> None:
        folder, name = os.path.split(target)
        _sweep_once(folder)
        prefix = f".{name[:_NAME_ROOM]}{TEMP_MARK}{os.getpid()}-"
        fd, self.tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
        self.target, self._placed = target, False
        file: BinaryIO | None = None
        try:  # an interrupt (or any error) from here on must not leave the file behind
            file = os.fdopen(fd, "wb")
            _lock(fd)
            _pause_for_tests()
        except BaseException:
            os.close(fd) if file is None else file.close()
            _unlink(self.tmp)
            raise
        self.file: BinaryIO = file

    def flush(self, fsync: bool = False) -> None:
        self.file.flush()
        if fsync:
            os.fsync(self.file.fileno())

    def commit(self) -> None:
        replacing = os.path.exists(self.target)
        self.flush(fsync=replacing)
        self.put_in_place()
        if replacing:
            _fsync_dir(os.path.dirname(self.target))

    def put_in_place(self) -> None:
        """Rename the (flushed) temp file to the target, unless saves were cancelled; the lock is held until
        then."""
        _check_cancelled()
        _copy_mode(self.target, self.tmp)
        os.replace(self.tmp, self.target)
        self._placed = True
        self.file.close()

    def discard(self) -> None:
        """Close and remove the temp file (nothing to remove once it is in place)."""
        with suppress(OSError):  # a write that failed (a full disk) fails again as close flushes
            self.file.close()
        if not self._placed:
            _unlink(self.tmp)


@contextmanager
def atomic_files() -> Iterator[Callable[[str], BinaryIO]]:
    """Hand out temp files next to their targets; on success rename all (fsyncing those that replace an existing
    file first), on failure or interrupt delete all."""
    pending: list[PendingFile] = []

    def create(target: str) -> BinaryIO:
        pending.append(PendingFile(target))
        return pending[-1].file

    try:
        yield create
        replacing = {p.target for p in pending if os.path.exists(p.target)}
        for p in pending:
            p.flush(fsync=p.target in replacing)
        for p in pending:
            p.put_in_place()
        for folder in {os.path.dirname(target) for target in replacing}:
            _fsync_dir(folder)
    except OSError as exc:
        if pending and is_full(exc):  # named here for every writer (a plot, a shape engine, an array)
            raise write_error(exc, pending[-1].target) from exc
        raise
    finally:
        for p in pending:
            p.discard()


# --- temp files: interrupts and leftovers ---------------------------------------------------------------------

#: Marks this tool's temp files: ``.<target name>.gsrewrite-<pid>-<random>.tmp``.
TEMP_MARK = ".gsrewrite-"
_TEMP_NAME = re.compile(r"\..*\.gsrewrite-(?P<pid>[0-9]+)-[A-Za-z0-9_]+\.tmp", re.DOTALL)
#: A temp file older than this (seconds) is stale even when a process with its pid runs (pids are reused).
STALE_AFTER = 24 * 3600
_NAME_ROOM = 120  # characters of the target's name kept in a temp file's name (names are limited to 255 bytes)
_PAUSE_VARIABLE = "GSREWRITE_TEST_SAVE_PAUSE"
_cancelled = False  # a plain flag: set from a signal handler, which must not take locks
_swept: set[str] = set()
_swept_lock = threading.Lock()


def cancel_saves() -> None:
    """Make every save in progress, in any thread, remove its temp files instead of putting them in place
    (OutputError), until :func:`allow_saves`. The CLI calls it on SIGINT/SIGTERM; safe in a signal handler."""
    global _cancelled
    _cancelled = True


def allow_saves() -> None:
    """Undo :func:`cancel_saves`."""
    global _cancelled
    _cancelled = False


def _check_cancelled() -> None:
    if _cancelled:
        raise OutputError("the save was interrupted; nothing was written")


def _pause_for_tests() -> None:
    """Test hook: ``GSREWRITE_TEST_SAVE_PAUSE=SECONDS`` waits that long after creating each temp file (tests
    interrupt or kill a save there); a cancelled save stops waiting."""
    try:
        seconds = float(os.environ.get(_PAUSE_VARIABLE) or 0)
    except ValueError:
        return
    deadline = time.monotonic() + seconds
    while not _cancelled and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def remove_stale_temp_files(folder: str | os.PathLike[str]) -> list[str]:
    """Remove the temp files this tool left in ``folder`` when a process was killed mid-save (SIGKILL, a power
    cut): those whose pid no longer runs, or older than :data:`STALE_AFTER`; never one its writer still holds
    locked. Each removal is logged at INFO; returns the names removed."""
    try:
        with os.scandir(folder) as entries:
            found = [(e, int(m["pid"])) for e in entries if (m := _TEMP_NAME.fullmatch(e.name))]
    except OSError:
        return []
    removed = []
    for entry, pid in found:
        why = _stale_reason(entry, pid)
        if why and _remove_unlocked(entry.path):
            log.info("removed %s, a temp file of an interrupted gsrewrite save (%s)", entry.path, why)
            removed.append(entry.name)
    return removed


def _sweep_once(folder: str) -> None:
    key = os.path.realpath(folder or ".")
    with _swept_lock:
        if key in _swept:
            return
        _swept.add(key)
    remove_stale_temp_files(key)


def _stale_reason(entry: os.DirEntry[str], pid: int) -> str | None:
    try:
        if not entry.is_file(follow_symlinks=False):
            return None
        age = time.time() - entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return None
    if age > STALE_AFTER:
        return f"{age / 3600:.0f} hours old"
    return None if _pid_alive(pid) else f"process {pid} is gone"


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except (OverflowError, OSError):
        return False
    return True


def _lock(fd: int) -> None:
    """Hold an advisory lock on a temp file in use: :func:`remove_stale_temp_files` never removes a locked one
    (the lock ends with the process, however it ends)."""
    if fcntl is not None:
        with suppress(OSError):  # a file system without locks: the pid alone decides
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _remove_unlocked(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its writer still runs (in another pid namespace, say)
                return False
            except OSError:
                pass
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    with suppress(FileNotFoundError):
        os.remove(path)


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
