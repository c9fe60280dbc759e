"""A write that runs out of room: a full file system (ENOSPC), a disk quota (EDQUOT) or the file size limit
(EFBIG: ``ulimit -f``; the CLI ignores SIGXFSZ, which would otherwise end the process) becomes one
:class:`~gsrewrite.errors.NoSpaceError` naming the folder and what was being written. The code that opened the
file removes it as it does on any error (temp files are unlinked or deleted; nothing is left behind)."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator

from gsrewrite.errors import NoSpaceError

#: errno -> what it says about the folder
FULL = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded",
        errno.EFBIG: "the file size limit (ulimit -f) is reached"}


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that ran out of room (see the module)."""
    return isinstance(exc, OSError) and exc.errno in FULL


def no_space(exc: OSError, what: str, folder: str | os.PathLike[str] | None = None) -> NoSpaceError:
    """The error for ``exc`` (one of :data:`FULL`) while writing ``what`` in ``folder`` (default: the temp folder,
    which ``TMPDIR`` moves)."""
    where = os.fspath(folder) if folder is not None else tempfile.gettempdir()
    hint = "" if folder is not None else "; TMPDIR sets the folder of temp files"
    return NoSpaceError(f"cannot write {what} in '{where or '.'}': {FULL.get(exc.errno or 0, exc.strerror)}{hint}")


@contextlib.contextmanager
def writing(what: str, folder: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Within: an OSError of a full disk becomes :class:`NoSpaceError` (:func:`no_space`), and so does one a save
    inside made of it (a temp folder of this block's, removed by now, is not the folder to name); others pass."""
    try:
        yield
    except NoSpaceError as exc:
        if not isinstance(exc.__cause__, OSError):
            raise
        raise no_space(exc.__cause__, what, folder) from exc.__cause__
    except OSError as exc:
        if exc.errno in FULL:
            raise no_space(exc, what, folder) from exc
        raise
