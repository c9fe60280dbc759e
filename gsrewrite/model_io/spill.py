"""The one way gsrewrite keeps arrays on disk instead of in memory: a :class:`SpillFile`.

Three places spill: the payloads a request makes (:mod:`gsrewrite.model_io.scratch`), the weights handed to
onnxruntime as arrays (:mod:`gsrewrite.validation.in_memory`) and validation's reference outputs
(:mod:`gsrewrite.validation.kept_outputs`). Each appends payloads to a temporary file of its own, each aligned to
:data:`ALIGN` bytes, maps them back read-only (:meth:`SpillFile.map`) and, once they have been read, drops their
pages from the resident set (:func:`drop_pages`: clean file pages, read again from the file if needed). A write
that runs out of room is a :class:`~gsrewrite.errors.NoSpaceError` naming the temp folder and what was being
written (:mod:`gsrewrite.model_io.disk_space`).

The file is never left behind. Where the system can open a file of this process again by its descriptor
(``/proc/self/fd``, Linux) it is unlinked as soon as it is created, and :attr:`SpillFile.path` is that
descriptor's path: a killed process (SIGKILL, an out-of-memory kill) leaves nothing. Elsewhere a file that must
be read by path is named ``<prefix><pid>-...`` and removed by :meth:`SpillFile.close`; the first such file of a
later process removes those whose process is gone. One that needs no path is an anonymous temporary file.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from typing import IO

from gsrewrite.model_io.disk_space import writing

#: payload alignment in a spill file
ALIGN = 64
#: where an open file of this process can be opened again by path, even once unlinked (Linux)
_OWN_FDS = "/proc/self/fd"


class SpillFile:
    """A temporary file payloads are appended to and mapped back from; created on the first payload.

    ``what`` names the payloads in a no-space error; ``prefix`` starts the temp file's name; ``by_path``: readers
    open the file again by :attr:`path` (else only :meth:`map` reads it)."""

    def __init__(self, what: str, prefix: str, *, by_path: bool = False) -> None:
        self.what = what
        self.prefix = prefix
        self.by_path = by_path
        #: where the file can be opened again (its descriptor's path where the system has them); None until created
        self.path: str | None = None
        #: the bytes written so far (the next payload goes at the next aligned offset)
        self.size = 0
        self._fd: int | None = None
        self._file: IO[bytes] | None = None  # the anonymous temporary file, where one holds the descriptor

    def append(self, data: bytes | memoryview, *, align: int = ALIGN) -> int:
        """Write ``data`` at the next offset aligned to ``align``; returns that offset."""
        view = memoryview(data).cast("B")
        with writing(self.what):
            if self._fd is None:
                self._create()
            assert self._fd is not None
            offset = self.size + (-self.size % align)
            written = 0
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], offset + written)
        self.size = offset + len(view)
        return offset

    def boundary(self) -> int:
        """Move the end of the file up to the next offset a map may start at (:data:`mmap.ALLOCATIONGRANULARITY`)
        and return it: the payloads appended next can be mapped on their own (:meth:`map`)."""
        self.size += -self.size % mmap.ALLOCATIONGRANULARITY
        return self.size

    def map(self, start: int = 0) -> mmap.mmap:
        """A read-only map of the bytes from ``start`` (0, or a :meth:`boundary`) to the end written so far."""
        assert self._fd is not None, "nothing was appended"
        return mmap.mmap(self._fd, self.size - start, access=mmap.ACCESS_READ, offset=start)

    def close(self) -> None:
        """Remove the file (close it: an unlinked one is gone then; a map of it stays readable)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        elif self._fd is not None:
            os.close(self._fd)
        self._fd, self._file = None, None
        if self.path is not None and not self.path.startswith(_OWN_FDS):
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.path = None

    def __enter__(self) -> SpillFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _create(self) -> None:
        """The file (see the module doc)."""
        if os.path.isdir(_OWN_FDS):
            self._fd, path = tempfile.mkstemp(prefix=self.prefix, suffix=".bin")
            os.unlink(path)  # from now on only this process's descriptor holds it
            self.path = f"{_OWN_FDS}/{self._fd}"
        elif self.by_path:
            _remove_stale(self.prefix)
            self._fd, self.path = tempfile.mkstemp(prefix=f"{self.prefix}{os.getpid()}-", suffix=".bin")
        else:
            self._file = tempfile.TemporaryFile(prefix=self.prefix)  # noqa: SIM115 (lives with self)
            self._fd = self._file.fileno()


def drop_pages(mapped: mmap.mmap) -> None:
    """The map's pages leave the resident set (they are clean: read again from the file when used)."""
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED)


def _remove_stale(prefix: str) -> None:
    """Remove the named spill files (no /proc) of ``prefix`` whose process is gone."""
    folder = tempfile.gettempdir()
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            pid = entry.name[len(prefix):].partition("-")[0]
            if entry.name.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's process
        return True
    except (OSError, OverflowError):  # gone, or no such pid at all
        return False
    return True
