"""The reference's outputs, kept for every candidate to be compared with, without holding them all in memory.

A decoder's reference outputs are large: GPT-2 base keeps ~170 MB of logits and presents over its 18 validation
runs (6 input sets at each of 3 sizes), two thirds of its weights again. A run's outputs of at least
:data:`SPILL_BYTES` are written to a spill file (:mod:`gsrewrite.model_io.spill`) and read back through a memory
map; after a comparison has read them, :meth:`KeptOutputs.release` drops their pages from the resident set
(clean file pages, read again from the file by the next comparison). Smaller outputs, and outputs that are not
plain arrays (sequences), stay in memory as they are.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from gsrewrite.model_io.spill import SpillFile, drop_pages

#: a run's array outputs of at least this many bytes in all go to the scratch file
SPILL_BYTES = 8 << 20


class _Spilled(dict):  # type: ignore[type-arg]
    """One run's outputs, arrays viewing ``mapped`` (a map of their region of the scratch file)."""

    mapped: mmap.mmap


class KeptOutputs:
    """A scratch file for large reference outputs; :meth:`close` (or the object's end) removes it."""

    def __init__(self, spill_bytes: int | None = None) -> None:
        self.spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self._file = SpillFile("validation's reference outputs", "gsrewrite-outputs-")
        self._maps: list[mmap.mmap] = []

    def keep(self, outputs: dict[str, Any]) -> dict[str, Any]:
        """``outputs`` as they will be kept: the same dict when small, else its arrays read-only views of the
        scratch file (equal values, dtypes and shapes)."""
        arrays = {name: value for name, value in outputs.items()
                  if isinstance(value, np.ndarray) and value.dtype != object and value.nbytes}
        if sum(a.nbytes for a in arrays.values()) < self.spill_bytes:
            return outputs
        return self._spilled(outputs, arrays)

    def _spilled(self, outputs: dict[str, Any], arrays: dict[str, np.ndarray]) -> _Spilled:
        file = self._file
        start = file.boundary()  # this run's outputs get a map of their own
        places = {name: file.append(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data) - start
                  for name, array in arrays.items()}
        mapped = file.map(start)
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
        if isinstance(outputs, _Spilled):
            drop_pages(outputs.mapped)

    def close(self) -> None:
        """Remove the scratch file (the kept views must not be read afterwards)."""
        self._file.close()
