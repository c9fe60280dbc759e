"""Files the user names as data (input arrays, calibration sets, pattern files): opened only when they are regular
files.

A named pipe nobody writes to blocks a reader forever and a device (``/dev/zero``, a link to it) never ends, so
the check is made on the opened file itself (``fstat``), with the path opened non-blocking: a FIFO swapped in
after a look at the path could not block either.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from gsrewrite.errors import GsrewriteError, InputDataError

_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def open_regular(path: str | os.PathLike[str], what: str,
                 error: type[GsrewriteError] = InputDataError) -> BinaryIO:
    """``path`` opened for reading in binary mode, when it is a regular file (links followed); else ``error``
    with one line naming ``what`` (``"input file"``) and the path."""
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise error(f"{what} not found: '{name}'") from None
    except IsADirectoryError:
        raise error(f"{what} '{name}' is a directory, not a file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise error(f"cannot read {what} '{name}': {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{what} '{name}' is a directory, not a file")
        if not stat.S_ISREG(mode):
            kind = next((text for test, text in _KINDS if test(mode)), "not a regular file")
            raise error(f"{what} '{name}' is {kind}, not a regular file: it is not read")
        if flags & getattr(os, "O_NONBLOCK", 0):  # no effect on a regular file; cleared all the same
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
