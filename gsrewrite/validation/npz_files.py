"""Reading the ``.npz`` files a user names (``--inputs``, ``--input-data``, ``--calibration`` and every file of a
``--calibration`` folder): the one loader for all of them.

Before anything is inflated, each file is checked from its headers alone: it must be a regular file (a FIFO would
block, a device never end), a zip archive whose members are ``.npy`` arrays without pickles, each member's ``.npy``
header (shape, dtype) must agree with the size the zip directory declares for it, and the arrays of every file
read together must fit the memory budget (default: validation's, half the memory available). A 23 MB archive
that inflates to 5 GiB, or a header declaring a (2**40, 64) array, is refused in milliseconds with one line
(:class:`InputDataError`) instead of filling the memory. Only then are the arrays read, one member at a time.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from gsrewrite.errors import InputDataError
from gsrewrite.model_io.user_files import open_regular
from gsrewrite.validation.memory import default_budget, format_bytes

_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, NotImplementedError)
_HEADER_LIMIT = 10_000  # bytes of an .npy header numpy reads by default (its safety limit for literal_eval)


@dataclass(frozen=True)
class NpzMember:
    """One array of an .npz file, as its headers declare it."""

    name: str  # the key (member name without ``.npy``)
    member: str  # the member's name in the zip
    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def load_npz(path: str | os.PathLike[str], what: str = "input",
             budget: int | None = None) -> dict[str, np.ndarray]:
    """Every array of one ``.npz`` file (see the module: checked from its headers first); :class:`InputDataError`
    naming the path when it cannot be read or does not fit ``budget`` bytes (``what``: what the arrays are, for
    the message: ``"input"``, ``"calibration input"``)."""
    return load_npz_files([path], what, budget)[0]


def load_npz_files(paths: Sequence[str | os.PathLike[str]], what: str = "input",
                   budget: int | None = None) -> list[dict[str, np.ndarray]]:
    """The arrays of every file in ``paths`` (one dict per file), read only after the headers of all of them show
    that they fit ``budget`` bytes together (default :func:`~gsrewrite.validation.memory.default_budget`)."""
    budget = default_budget() if budget is None else budget
    declared = [npz_members(path, what) for path in paths]
    total = sum(m.nbytes for members in declared for m in members)
    if total > budget:
        path, largest = max(((p, m) for p, members in zip(paths, declared, strict=True) for m in members),
                            key=lambda pair: pair[1].nbytes)
        where = f"'{os.fspath(paths[0])}'" if len(paths) == 1 else f"{len(paths)} files"
        raise InputDataError(
            f"the {what}s in {where} need {format_bytes(total)}, over the memory budget of {format_bytes(budget)} "
            f"(largest: '{largest.name}' {_describe(largest)} in '{os.fspath(path)}'); nothing was read")
    return [_read(path, what, members) for path, members in zip(paths, declared, strict=True)]


def npz_members(path: str | os.PathLike[str], what: str = "input") -> list[NpzMember]:
    """The arrays of an ``.npz`` file from its zip directory and ``.npy`` headers (nothing else is inflated);
    :class:`InputDataError` when it is not a regular file, not an .npz of plain arrays, or declares an array
    its member cannot hold."""
    name = os.fspath(path)
    with open_regular(name, f"{what} file") as f:
        try:
            archive = zipfile.ZipFile(f)
        except zipfile.BadZipFile:
            raise InputDataError(_not_npz(f, what, name)) from None
        except _READ_ERRORS as exc:
            raise InputDataError(f"cannot read {what}s from '{name}': {_reason(exc)}") from None
        with archive:
            return _members(archive, what, name)


def _members(archive: zipfile.ZipFile, what: str, name: str) -> list[NpzMember]:
    found: dict[str, NpzMember] = {}
    for info in archive.infolist():
        if info.is_dir():
            continue
        key = info.filename.removesuffix(".npy")
        if key in found:
            raise InputDataError(f"cannot read {what}s from '{name}': it holds the array '{key}' twice")
        try:
            with archive.open(info) as member:
                shape, dtype, header = _header(member)
        except _READ_ERRORS as exc:
            raise InputDataError(f"cannot read {what}s from '{name}': member '{info.filename}' {_reason(exc)}"
                                 ) from None
        array = NpzMember(key, info.filename, shape, dtype)
        if header + array.nbytes > info.file_size:
            raise InputDataError(
                f"cannot read {what}s from '{name}': the array '{key}' declares {_describe(array)} "
                f"({format_bytes(array.nbytes)}) but its member holds {format_bytes(max(info.file_size - header, 0))}")
        found[key] = array
    return list(found.values())


def _header(member: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """Shape, dtype and header length of an ``.npy`` stream (only the header is read)."""
    fmt = np.lib.format
    if member.read(len(fmt.MAGIC_PREFIX)) != fmt.MAGIC_PREFIX:
        raise ValueError("is not a .npy array")
    major, minor = (int(b) for b in member.read(2))
    if (major, minor) == (1, 0):
        shape, _, dtype = fmt.read_array_header_1_0(member, max_header_size=_HEADER_LIMIT)
    elif (major, minor) == (2, 0):
        shape, _, dtype = fmt.read_array_header_2_0(member, max_header_size=_HEADER_LIMIT)
    else:
        raise ValueError(f"has .npy format version {major}.{minor}, which is not read")
    if dtype.hasobject:
        raise ValueError("holds Python objects (a pickle), which are not read")
    if any(d < 0 for d in shape):
        raise ValueError(f"declares the negative shape {list(shape)}")
    return tuple(int(d) for d in shape), dtype, member.tell()


def _read(path: str | os.PathLike[str], what: str, members: list[NpzMember]) -> dict[str, np.ndarray]:
    """The arrays of one checked file; the headers are checked again (the file may have changed meanwhile)."""
    name = os.fspath(path)
    with open_regular(name, f"{what} file") as f:
        try:
            with zipfile.ZipFile(f) as archive:
                if _members(archive, what, name) != members:
                    raise InputDataError(f"cannot read {what}s from '{name}': it changed while it was being read")
                arrays = {}
                for array in members:
                    with archive.open(array.member) as member:
                        arrays[array.name] = np.lib.format.read_array(member, allow_pickle=False)
                return arrays
        except InputDataError:
            raise
        except _READ_ERRORS as exc:
            raise InputDataError(f"cannot read {what}s from '{name}': {_reason(exc)}") from None


def _not_npz(f: IO[bytes], what: str, name: str) -> str:
    f.seek(0)
    if f.read(len(np.lib.format.MAGIC_PREFIX)) == np.lib.format.MAGIC_PREFIX:
        return f"'{name}' holds a single array (.npy), not an .npz file of named {what}s"
    return f"cannot read {what}s from '{name}': not an .npz file (a zip archive of .npy arrays)"


def _describe(array: NpzMember) -> str:
    return f"{list(array.shape)} {array.dtype}"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
