"""``deduplicate-constants``: constants with equal values become one tensor (scs4onnx's shrink mode).

Constants are grouped by dtype and shape, and only groups with more than one member are hashed (blake2b of
the length and of samples of the bytes; equal digests are confirmed byte for byte), so the cost is a few
hundred bytes per candidate, never a pairwise comparison of weights. The first constant of each group (in
graph order) keeps its name. Constants also read by other graphs (If/Loop/Scan bodies or the enclosing
graph) are left alone, so a tensor never moves between scopes.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import numpy as np
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from gsrewrite.graph.core import FileValues, constant_values
from gsrewrite.graph.rewiring import replace_uses
from gsrewrite.model_io.weights import payload_range, read_range, same_bytes
from gsrewrite.simplifier.passes.base import SimplifyOptions, SimplifyPass

_SAMPLE = 512


class DeduplicateConstants(SimplifyPass):
    name = "deduplicate-constants"
    description = "Share one tensor between constants with equal values (found by hashing)."

    def __init__(self) -> None:
        self._digests: dict[int, tuple[gs.Constant, bytes]] = {}  # by id; holds the tensor so ids stay unique

    def configure(self, options: SimplifyOptions) -> DeduplicateConstants:
        return DeduplicateConstants()  # a fresh digest cache for every run

    def apply(self, graph: gs.Graph) -> int:
        count = 0
        for group in _groups(graph):
            kept: dict[bytes, list[gs.Constant]] = defaultdict(list)
            for tensor in group:
                candidates = kept[self._digest(tensor)]
                same = next((c for c in candidates if _equal(c, tensor)), None)
                if same is None:
                    candidates.append(tensor)
                else:
                    replace_uses(tensor, same)
                    count += 1
        return count

    def _digest(self, tensor: gs.Constant) -> bytes:
        cached = self._digests.get(id(tensor))
        if cached is None or cached[0] is not tensor:
            found = _in_file(tensor)
            cached = tensor, fingerprint(_bytes(tensor)) if found is None else _file_fingerprint(found)
            self._digests[id(tensor)] = cached
        return cached[1]


def fingerprint(data: bytes) -> bytes:
    """A hash of the length and of three 512-byte samples (start, middle, end): equal values always share
    it, and distinct weights almost never do; equality is then confirmed on the full bytes."""
    if len(data) > 3 * _SAMPLE:
        middle = len(data) // 2
        data = b"".join([len(data).to_bytes(8, "little"), data[:_SAMPLE], data[middle:middle + _SAMPLE],
                         data[-_SAMPLE:]])
    return hashlib.blake2b(data, digest_size=16).digest()


def _file_fingerprint(found: tuple[str, int, int]) -> bytes:
    """:func:`fingerprint` of a payload that stays in its file, from the three samples read there."""
    path, offset, length = found
    if length <= 3 * _SAMPLE:
        return fingerprint(read_range(path, offset, length))
    middle = length // 2
    data = b"".join([length.to_bytes(8, "little"), read_range(path, offset, _SAMPLE),
                     read_range(path, offset + middle, _SAMPLE), read_range(path, offset + length - _SAMPLE, _SAMPLE)])
    return hashlib.blake2b(data, digest_size=16).digest()


def _in_file(tensor: gs.Constant) -> tuple[str, int, int] | None:
    """Where an untouched constant of a model read weightless keeps its bytes (a little-endian payload)."""
    lazy = getattr(tensor, "_values", None)
    return payload_range(lazy.tensor, lazy.folder) if isinstance(lazy, FileValues) else None


def _bytes(tensor: gs.Constant) -> bytes:
    """The little-endian bytes of the value: straight from the TensorProto when it is still unloaded."""
    lazy = getattr(tensor, "_values", None)
    if isinstance(lazy, LazyValues) and lazy.tensor.HasField("raw_data"):
        return lazy.tensor.raw_data
    return np.ascontiguousarray(constant_values(tensor)).astype(tensor.dtype.newbyteorder("<"), copy=False).tobytes()


def _equal(a: gs.Constant, b: gs.Constant) -> bool:
    in_a, in_b = _in_file(a), _in_file(b)
    if in_a is not None and in_b is not None:
        return same_bytes(in_a, in_b)  # never both payloads in memory at once
    return _bytes(a) == _bytes(b)


def _groups(graph: gs.Graph) -> list[list[gs.Constant]]:
    """Constants read only by this graph's nodes, grouped by (dtype, shape); groups of one are dropped."""
    local = {id(n) for n in graph.nodes}
    io = {id(t) for t in graph.inputs} | {id(t) for t in graph.outputs}
    groups: dict[tuple, list[gs.Constant]] = defaultdict(list)
    seen: set[int] = set()
    for node in graph.nodes:
        for tensor in node.inputs:
            if not isinstance(tensor, gs.Constant) or id(tensor) in seen or id(tensor) in io:
                continue
            seen.add(id(tensor))
            if all(id(c) in local for c in tensor.outputs):
                groups[(tensor.dtype, tuple(tensor.shape))].append(tensor)
    return [g for g in groups.values() if len(g) > 1]
