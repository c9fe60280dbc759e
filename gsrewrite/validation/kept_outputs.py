"""The reference's outputs, kept for every candidate to be compared with, without holding them all in memory.

A decoder's reference outputs are large: GPT-2 base keeps ~170 MB of logits and presents over its 18 validation
runs (6 input sets at each of 3 sizes), two thirds of its weights again. A run's outputs of at least
:data:`SPILL_BYTES` are written to an unlinked scratch file and read back through a memory map; after a
comparison has read them, :meth:`KeptOutputs.release` drops their pages from the resident set (clean file pages,
read again from the file by the next comparison). Smaller outputs, and outputs that are not plain arrays
(sequences), stay in memory as they are.
"""

from __future__ import annotations

import contextlib
import mmap
import tempfile
from typing import IO, Any

import numpy as np

from gsrewrite.model_io.disk_space import writing

#: a run's array outputs of at least this many bytes in all go to the scratch file
SPILL_BYTES = 8 << 20


class _Spilled(dict):  # type: ignore[type-arg]
    """One run's outputs, arrays viewing ``mapped`` (a map of their region of the scratch file)."""

    mapped: mmap.mmap


class KeptOutputs:
    """A scratch file for large reference outputs; :meth:`close` (or the object's end) removes it."""

    def __init__(self, spill_bytes: int | None = None) -> None:
        self.spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self._file: IO[bytes] | None = None
        self._maps: list[mmap.mmap] = []

    def keep(self, outputs: dict[str, Any]) -> dict[str, Any]:
        """``outputs`` as they will be kept: the same dict when small, else its arrays read-only views of the
        scratch file (equal values, dtypes and shapes)."""
        arrays = {name: value for name, value in outputs.items()
                  if isinstance(value, np.ndarray) and value.dtype != object and value.nbytes}
        if sum(a.nbytes for a in arrays.values()) < self.spill_bytes:
            return outputs
        with writing("validation's reference outputs"):
            return self._spilled(outputs, arrays)

    def _spilled(self, outputs: dict[str, Any], arrays: dict[str, np.ndarray]) -> _Spilled:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="gsrewrite-outputs-")  # noqa: SIM115 (lives with self)
        file = self._file
        start = file.seek(0, 2)
        start += -start % mmap.ALLOCATIONGRANULARITY  # a map starts on the granularity
        file.truncate(start)
        file.seek(start)
        places: dict[str, int] = {}
        for name, array in arrays.items():
            file.write(b"\0" * (-file.tell() % 64))
            places[name] = file.tell() - start
            file.write(np.ascontiguousarray(array).tobytes())
        file.flush()
        mapped = mmap.mmap(file.fileno(), file.tell() - start, access=mmap.ACCESS_READ, offset=start)
        self._maps.append(mapped)
        kept = _Spilled(outputs)
        for name, array in arrays.items():
            kept[name] = np.frombuffer(mapped, dtype=array.dtype, count=array.size,
                                       offset=places[name]).reshape(array.shape)
        kept.mapped = mapped
        return kept

    @staticmethod
    def release(outputs: dict[str, Any]) -> None:
        """A comparison has read ``outputs``: their scratch pages leave the resident set (a no-op for outputs kept
        in memory)."""
        if isinstance(outputs, _Spilled) and hasattr(mmap, "MADV_DONTNEED"):
            outputs.mapped.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        """Remove the scratch file (the kept views must not be read afterwards)."""
        if self._file is not None:
            with contextlib.suppress(OSError):  # a write that failed (a full disk) fails again in close's flush
                self._file.close()
            self._file = None
