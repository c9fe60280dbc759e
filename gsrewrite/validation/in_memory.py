"""Hand an in-memory model to onnxruntime without serializing its weights.

onnxruntime parses a serialized model and copies every initializer out of the buffer, so a model serialized
whole is one more model-sized copy while its session is created. Instead the graph is serialized with its large
initializers marked as external data, and the weights are given to the session as arrays
(``SessionOptions.add_external_initializers``): views of the model's serialized bytes when the caller has them,
else each payload copied once into a spill file (:mod:`gsrewrite.model_io.spill`) and viewed through a memory map.
onnxruntime 1.32 copies them into its own buffers at session creation, but its API documents them as used in
place, so they are kept alive as long as the session; the scratch pages are dropped from memory once the session
exists (:meth:`InMemoryModel.session_created`): they are clean file pages, read back from the file should
onnxruntime ever use them in place, so the payloads a rewrite made are not resident twice (the model's, and
onnxruntime's copy) plus a third time while onnxruntime runs. The result is the same
model; only the way its bytes reach onnxruntime differs. It is kept for memory, not speed: at base width
(BERT-base, 255 MB) validating the whole serialized model took no longer but 20 MB (4%) more peak RSS
(benchmarks/results/validation_sessions.md).
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from gsrewrite.graph.core import copy_fields
from gsrewrite.model_io.scratch import is_scratch
from gsrewrite.model_io.scratch import mapped as scratch_map
from gsrewrite.model_io.spill import SpillFile, drop_pages
from gsrewrite.model_io.wire import initializer_payloads

#: Initializers with at least this many bytes of ``raw_data`` are passed as arrays.
MIN_TENSOR_BYTES = 4096
#: Below this many such bytes in all, the plain serialized model is used: there is no copy worth saving.
MIN_TOTAL_BYTES = 8 << 20

_NUMPY_TYPES: dict[int, type] = {
    onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT8: np.int8, onnx.TensorProto.INT16: np.int16, onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT64: np.int64, onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.UINT16: np.uint16,
    onnx.TensorProto.UINT32: np.uint32, onnx.TensorProto.UINT64: np.uint64, onnx.TensorProto.BOOL: np.bool_,
}
_LOCATION = "gsrewrite-in-memory"


@dataclass
class InMemoryModel:
    """The serialized graph and the initializers onnxruntime gets as arrays (kept alive with the session)."""

    data: bytes
    names: list[str] = field(default_factory=list)
    arrays: list[np.ndarray] = field(default_factory=list)
    values: list[Any] = field(default_factory=list, repr=False)
    #: the memory maps the arrays view (a scratch file of copies, the request's scratch file), if any
    maps: list[mmap.mmap] = field(default_factory=list, repr=False)

    def session_created(self) -> None:
        """onnxruntime has taken the arrays: drop the scratch file's pages from the resident set (they are read
        back from the file if onnxruntime uses them in place after all)."""
        for mapped in self.maps:
            drop_pages(mapped)

    def add_to(self, options: Any) -> None:
        """Register the arrays with onnxruntime ``SessionOptions``; this object must outlive the session."""
        import onnxruntime as ort

        self.values = [ort.OrtValue.ortvalue_from_numpy(array) for array in self.arrays]
        options.add_external_initializers(self.names, self.values)


def in_memory_model(model: onnx.ModelProto, data: bytes | None = None) -> InMemoryModel | None:
    """``model`` split into a small serialized graph and its large initializers; ``None`` when that gains
    nothing (few weight bytes) or the graph alone is still over protobuf's limit. ``data``: ``model`` already
    serialized; the arrays are then views of its payloads, not copies (onnxruntime copies them into its own
    buffers at session creation: measured with onnxruntime 1.32, so no extra model-sized copy exists)."""
    counts: dict[str, int] = {}
    for tensor in model.graph.initializer:
        counts[tensor.name] = counts.get(tensor.name, 0) + 1
    large = [t for t in model.graph.initializer if counts[t.name] == 1 and _nbytes(t) >= MIN_TENSOR_BYTES]
    # payloads the request made, in its scratch file (model_io/scratch.py): onnxruntime cannot read that file
    made = [t for t in model.graph.initializer if counts[t.name] == 1 and t.data_type in _NUMPY_TYPES
            and is_scratch(t)]
    if not made and sum(_nbytes(t) for t in large) < MIN_TOTAL_BYTES:
        return None
    chosen = {id(t) for t in (*large, *made)}
    request_map = scratch_map() if made else None
    light = onnx.ModelProto()
    copy_fields(light, model, skip=("graph",))
    copy_fields(light.graph, model.graph, skip=("initializer",))
    names: list[str] = []
    views: list[tuple[onnx.TensorProto, memoryview | tuple[int, int]]] = []
    payloads = initializer_payloads(data) if data is not None else None
    if payloads is not None and len(payloads) != len(model.graph.initializer):
        payloads = None
    with SpillFile("a copy of the model's weights for onnxruntime", "gsrewrite-weights-") as copies:
        for index, tensor in enumerate(model.graph.initializer):
            if id(tensor) not in chosen:
                light.graph.initializer.append(tensor)
                continue
            where = payloads[index] if payloads is not None else None
            place: memoryview | tuple[int, int]
            if is_scratch(tensor):
                entries = {e.key: e.value for e in tensor.external_data}
                start, length = int(entries.get("offset", "0")), int(entries["length"])
                assert request_map is not None
                place = memoryview(request_map)[start:start + length]
            elif data is not None and where is not None and where[1] == _nbytes(tensor):
                place = memoryview(data)[where[0]:where[0] + where[1]]
            else:  # a copy (protobuf has no view of it), written out at once: one payload in memory at a time
                raw = tensor.raw_data
                if len(raw) != _nbytes(tensor):  # not what it declares: onnxruntime sees it as it is
                    light.graph.initializer.append(tensor)
                    continue
                place = (copies.append(raw), len(raw))
                del raw
            stub = light.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
            stub.data_location = onnx.TensorProto.EXTERNAL
            stub.external_data.add(key="location", value=_LOCATION)
            names.append(tensor.name)
            views.append((tensor, place))
        try:
            serialized = light.SerializeToString()
        except ValueError:  # the graph without its large weights is still over 2 GB
            return None
        mapped = copies.map() if copies.size else None
    arrays = []
    for tensor, place in views:
        if isinstance(place, tuple):
            assert mapped is not None
            place = memoryview(mapped)[place[0]:place[0] + place[1]]
        arrays.append(np.frombuffer(place, dtype=_NUMPY_TYPES[tensor.data_type]).reshape(tuple(tensor.dims)))
    maps = [m for m in (mapped, request_map) if m is not None]
    return InMemoryModel(serialized, names, arrays, maps=maps)


def _nbytes(tensor: onnx.TensorProto) -> int:
    """The declared size of an inline ``raw_data`` tensor of a plain numpy type, else 0 (it stays in the proto).
    From the declaration: reading ``raw_data`` copies the payload."""
    if tensor.data_type not in _NUMPY_TYPES or tensor.data_location == onnx.TensorProto.EXTERNAL \
            or tensor.external_data or not tensor.name or not tensor.HasField("raw_data") \
            or min(tensor.dims, default=0) < 0:
        return 0
    return math.prod(tensor.dims) * np.dtype(_NUMPY_TYPES[tensor.data_type]).itemsize
