"""Payloads a request makes, kept in a scratch file instead of in memory (issue 27: a rewrite that creates a tensor
owns only that tensor, and not twice).

A request that reads its model weightless (:func:`gsrewrite.model_io.weights.weights_from`) also binds a
:class:`Scratch`: when the graph is exported (``graph.core.write_graph``), an array a pass or a fusion made (a packed
Q/K/V weight, a folded constant) of at least :data:`SPILL_BYTES` is appended to the scratch file and exported as an
external-data reference to it, like the model's own weights. Every reader resolves references through
:func:`gsrewrite.model_io.weightless.external_range`, which knows the scratch file's location token; onnxruntime,
which cannot, is given those payloads as arrays mapped from the file (``validation/in_memory.py``). Before a
request hands its result back, :func:`gsrewrite.model_io.weights.inlined` puts the payloads back into the model
(the scratch file is removed when the request ends), so a caller never sees a reference to it.

The scratch file is a :class:`~gsrewrite.model_io.spill.SpillFile` (never in the user's folders), created on the
first payload and removed when the outermost binding ends; bindings nest (an inner request shares the outer one's
file). On Linux it is unlinked as soon as it is created and read through ``/proc/self/fd/N``: a killed process
(SIGKILL, an out-of-memory kill) leaves nothing behind. Elsewhere it is named ``gsrewrite-scratch-<pid>-...`` and
the first scratch file of a later process removes those whose process is gone.
"""

from __future__ import annotations

import contextlib
import mmap
import uuid
from collections.abc import Iterator

import numpy as np
from onnx import TensorProto, helper

from gsrewrite.model_io.spill import SpillFile
from gsrewrite.request import bound, current

#: arrays of at least this many bytes go to the scratch file when exported
SPILL_BYTES = 1 << 20


class Scratch:
    """One request's scratch file: payloads appended, referred to by a location token no real file has."""

    def __init__(self) -> None:
        self.token = f"gsrewrite-scratch-{uuid.uuid4().hex}.bin"
        self.file = SpillFile("the request's scratch file (weights a rewrite made)", "gsrewrite-scratch-",
                              by_path=True)

    @property
    def path(self) -> str | None:
        """Where readers open the file (None before the first payload)."""
        return self.file.path

    def write(self, data: bytes | memoryview) -> tuple[int, int]:
        """Append ``data``; returns its (offset, length). A full temp folder is a
        :class:`~gsrewrite.errors.NoSpaceError`."""
        offset = self.file.append(data)
        return offset, self.file.size - offset

    def close(self) -> None:
        """Remove the file (close it: an unlinked one is gone then)."""
        self.file.close()


@contextlib.contextmanager
def scratch_file() -> Iterator[Scratch]:
    """Bind a scratch file for this block (the request's ``scratch``: this thread and the contexts copied from
    it); inside a block that has one already, that one."""
    bound_already = current().scratch
    if bound_already is not None:
        yield bound_already
        return
    scratch = Scratch()
    try:
        with bound(scratch=scratch):
            yield scratch
    finally:
        scratch.close()


def resolve(location: str) -> str | None:
    """The scratch file's path when ``location`` is the bound scratch file's token, else None."""
    scratch = current().scratch
    return scratch.path if scratch is not None and location == scratch.token else None


def mapped() -> mmap.mmap | None:
    """A read-only map of the bound scratch file as written so far (None when nothing is bound or written)."""
    scratch = current().scratch
    return scratch.file.map() if scratch is not None and scratch.file.size else None


def is_scratch(tensor: TensorProto) -> bool:
    """Whether ``tensor`` refers to the bound scratch file."""
    return tensor.data_location == TensorProto.EXTERNAL and any(
        e.key == "location" and resolve(e.value) is not None for e in tensor.external_data)


def spill(name: str, values: np.ndarray) -> TensorProto | None:
    """``values`` appended to the bound scratch file, as a tensor referring to them; None when no scratch file
    is bound, the array is small, or its type is not a plain numpy one (it is then exported as it is)."""
    scratch = current().scratch
    if scratch is None or values.nbytes < SPILL_BYTES or values.dtype.kind not in "biuf" \
            or values.dtype.fields is not None:
        return None
    try:
        data_type = helper.np_dtype_to_tensor_dtype(values.dtype)
    except (KeyError, ValueError, TypeError):
        return None
    little = np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<"), copy=False)
    offset, length = scratch.write(little.data)
    tensor = TensorProto(name=name, data_type=data_type, dims=values.shape, data_location=TensorProto.EXTERNAL)
    for key, value in (("location", scratch.token), ("offset", str(offset)), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)
    return tensor

