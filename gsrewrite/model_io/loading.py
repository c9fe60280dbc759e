"""Loading ONNX models from untrusted files, with every problem reported as a typed error.

The protobuf is parsed without following external-data references; the model is then checked in order
— text fields (names must be valid UTF-8), tensor declarations and inline payloads, external-data entries (see
:mod:`gsrewrite.model_io.external_data`), graph structure (see :mod:`gsrewrite.model_io.structure`) — and
only then is external data read. Every error message names the file and the tensor or node at fault.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager

from google.protobuf.message import DecodeError
from onnx import ModelProto

from gsrewrite.errors import InvalidModelError, ModelError, ModelNotFoundError, NotAnOnnxModelError
from gsrewrite.model_io.external_data import external_refs, read_external_data
from gsrewrite.model_io.structure import check_structure, check_text
from gsrewrite.model_io.tensors import DEFAULT_MAX_TENSOR_BYTES, check_tensors
from gsrewrite.model_io.user_files import open_regular
from gsrewrite.model_io.wire import initializer_payloads

_IR_VERSION_TAG = b"\x08"  # field 1 (ir_version), varint: the first byte of every model onnx writes


def load_model(
    path: str | os.PathLike[str], *, load_external_data: bool = True, max_tensor_bytes: int | None = None
) -> ModelProto:
    """Load and check the ONNX model at ``path``.

    External data is read only from files inside the model's folder. With ``load_external_data=False``
    the external-data entries are still validated but left in place. ``max_tensor_bytes`` caps the declared
    size of any single tensor (default 16 GiB). Raises ModelNotFoundError, NotAnOnnxModelError,
    ExternalDataError, InvalidModelError or ModelTooLargeError with a one-sentence message.
    """
    name = os.fspath(path)
    base_dir = os.path.dirname(os.path.abspath(name))
    with _mapped_file(name) as data:
        return _checked_model(data, name, base_dir, load_external_data, max_tensor_bytes)


def load_model_bytes(
    data: bytes,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    load_external_data: bool = True,
    max_tensor_bytes: int | None = None,
    name: str = "<bytes>",
) -> ModelProto:
    """Like :func:`load_model` for a serialized model; external data is looked up in ``base_dir``."""
    folder = None if base_dir is None else os.fspath(base_dir)
    return _checked_model(data, name, folder, load_external_data, max_tensor_bytes)


@contextmanager
def _mapped_file(name: str) -> Iterator[bytes | memoryview]:
    """The file's bytes as a view of a read-only mapping, valid inside the block: protobuf parses from it
    directly (faster than reading the file into bytes first: benchmarks/results/code_figures.md; the parsed
    model holds its own copy either way)."""
    _read_file_checks(name)
    with contextlib.ExitStack() as stack:
        try:  # only opening and mapping are reading the file: an OSError of the caller's block is its own
            # opened without blocking and checked on the open descriptor: a FIFO swapped in after the path checks
            # is refused, not waited on
            f = stack.enter_context(open_regular(name, "model file", ModelNotFoundError))
            data: bytes | memoryview = b""
            if os.fstat(f.fileno()).st_size:
                try:
                    data = stack.enter_context(memoryview(stack.enter_context(
                        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))))
                except (OSError, ValueError):  # a file system that cannot map it: read it
                    data = f.read()
        except OSError as exc:
            raise ModelNotFoundError(f"cannot read model file '{name}': {exc.strerror}") from exc
        yield data


def _read_file_checks(name: str) -> None:
    """The path names a regular file (ModelNotFoundError otherwise)."""
    if not os.path.lexists(name):
        raise ModelNotFoundError(f"model file '{name}' does not exist")
    if os.path.isdir(name):
        raise ModelNotFoundError(f"'{name}' is a directory, not an ONNX model file")
    if not os.path.isfile(name):
        raise ModelNotFoundError(f"'{name}' is not a regular file (broken link or special file)")


def _checked_model(
    data: bytes | memoryview, name: str, base_dir: str | None, load_external_data: bool, max_tensor_bytes: int | None
) -> ModelProto:
    model = parse_model(data, name)
    cap = DEFAULT_MAX_TENSOR_BYTES if max_tensor_bytes is None else max_tensor_bytes
    with _named_after(name):
        check_text(model, data)
        check_tensors(model, max_tensor_bytes=cap, payloads=_payloads(data))
        refs = external_refs(model, base_dir, cap)
        if load_external_data:
            read_external_data(refs)
        check_structure(model)
    return model


def parse_model(data: bytes | memoryview, name: str = "<bytes>") -> ModelProto:
    """Parse a serialized ModelProto; raise NotAnOnnxModelError/InvalidModelError if it is not a model."""
    if not data:
        raise NotAnOnnxModelError(f"'{name}' is empty")
    model = ModelProto()
    try:
        try:
            model.ParseFromString(data)
        except TypeError:  # a protobuf implementation that parses bytes only
            model.ParseFromString(bytes(data))
    except (DecodeError, ValueError, RuntimeError) as exc:
        if bytes(data[:1]) == _IR_VERSION_TAG:
            raise NotAnOnnxModelError(f"'{name}' is truncated or corrupt (it cannot be parsed)") from exc
        raise NotAnOnnxModelError(f"'{name}' is not an ONNX model (it is not a protobuf ModelProto)") from exc
    _require_model_fields(model, name)
    return model


def _require_model_fields(model: ModelProto, name: str) -> None:
    if not model.HasField("graph"):
        if model.ir_version == 0 and not model.opset_import:
            raise NotAnOnnxModelError(
                f"'{name}' is a protobuf but not an ONNX model (it has no IR version, graph or opset imports)"
            )
        raise InvalidModelError(f"'{name}' is an ONNX model without a graph")
    if model.ir_version <= 0:
        raise InvalidModelError(f"'{name}' has no IR version")
    if not model.opset_import:
        raise InvalidModelError(f"'{name}' declares no opset imports (is it truncated?)")


@contextmanager
def _named_after(name: str) -> Iterator[None]:
    """Prefix the file name to model errors raised by checks that only see the ModelProto."""
    try:
        yield
    except ModelError as exc:
        raise type(exc)(f"{name}: {exc}") from None


#: a serialized model of at least this many bytes has its payload lengths read from the bytes (cheap: the
#: fields' headers only) rather than by copying every ``raw_data`` out of the parsed model
PAYLOAD_SCAN_BYTES = 8 << 20


def _payloads(data: bytes | memoryview) -> list[tuple[int, int] | None] | None:
    if len(data) < PAYLOAD_SCAN_BYTES:
        return None
    return initializer_payloads(data)
