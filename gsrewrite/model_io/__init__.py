"""Safe model I/O: checked loading (external data included) and atomic, non-destructive saving.

``load_model`` treats the file as untrusted input and raises a typed
:class:`~gsrewrite.errors.GsrewriteError` for anything wrong with it; ``check_structure`` re-runs the
graph checks after a rewrite; ``save_model`` writes atomically and never overwrites the input by
accident. See ``docs/model_io.md``.
"""

from __future__ import annotations

from gsrewrite.model_io.ir_version import clamp_ir_version, max_ir_version
from gsrewrite.model_io.loading import load_model, load_model_bytes, parse_model
from gsrewrite.model_io.saving import (
    PROTOBUF_LIMIT,
    check_output_path,
    needs_external_data,
    over_protobuf_limit,
    save_model,
    serialized_size,
    stored_size,
)
from gsrewrite.model_io.structure import check_structure
from gsrewrite.model_io.tensors import DEFAULT_MAX_TENSOR_BYTES, check_tensors, declared_nbytes

__all__ = [
    "DEFAULT_MAX_TENSOR_BYTES",
    "PROTOBUF_LIMIT",
    "check_output_path",
    "check_structure",
    "check_tensors",
    "clamp_ir_version",
    "declared_nbytes",
    "load_model",
    "load_model_bytes",
    "max_ir_version",
    "needs_external_data",
    "over_protobuf_limit",
    "parse_model",
    "save_model",
    "serialized_size",
    "stored_size",
]
