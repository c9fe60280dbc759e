"""The input signature of a model: name, dtype and dims (fixed sizes, symbolic names, or unknown)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from gsrewrite.errors import InputDataError

Dim = int | str | None


@dataclass(frozen=True)
class InputSpec:
    """One graph input that must be fed: ``dims`` is ``None`` when the model declares no shape."""

    name: str
    elem_type: int
    dims: tuple[Dim, ...] | None

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype onnxruntime expects for this input."""
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(self.elem_type))
        except (KeyError, ValueError, TypeError):
            raise InputDataError(f"input {self.name!r} has an unsupported element type {self.type_name}") from None

    @property
    def type_name(self) -> str:
        """The ONNX name of the element type (``FLOAT``, ``INT64``, ...)."""
        try:
            return onnx.TensorProto.DataType.Name(self.elem_type)
        except ValueError:
            return f"type {self.elem_type}"

    def describe(self) -> str:
        """``name: INT64[batch, 16]``, for messages."""
        dims = "?" if self.dims is None else ", ".join("?" if d is None else str(d) for d in self.dims)
        return f"{self.name}: {self.type_name}[{dims}]"


def model_inputs(model: onnx.ModelProto) -> list[InputSpec]:
    """The graph inputs that need data (inputs backed by an initializer are optional and left out)."""
    initializers = {t.name for t in model.graph.initializer}
    return [_spec(vi) for vi in model.graph.input if vi.name not in initializers]


def _spec(value_info: onnx.ValueInfoProto) -> InputSpec:
    if value_info.type.WhichOneof("value") != "tensor_type":
        raise InputDataError(f"input {value_info.name!r} is not a tensor; only tensor inputs are supported")
    tensor_type = value_info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return InputSpec(value_info.name, tensor_type.elem_type, None)
    dims = tuple(_dim(d) for d in tensor_type.shape.dim)
    return InputSpec(value_info.name, tensor_type.elem_type, dims)


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    """A fixed size, a symbolic name, or ``None``; a negative size (``-1``, as paddle2onnx writes) is dynamic."""
    if dim.HasField("dim_value"):
        return int(dim.dim_value) if dim.dim_value >= 0 else None
    return dim.dim_param or None


def check_same_inputs(original: Sequence[InputSpec], candidate: Sequence[InputSpec]) -> None:
    """Raise :class:`InputDataError` unless both models take the same input names with the same dtypes."""
    names0 = {s.name: s for s in original}
    names1 = {s.name: s for s in candidate}
    if names0.keys() != names1.keys():
        only0 = sorted(names0.keys() - names1.keys())
        only1 = sorted(names1.keys() - names0.keys())
        raise InputDataError(
            "the models take different inputs: "
            f"only in original: {', '.join(only0) or '-'}; only in candidate: {', '.join(only1) or '-'}"
        )
    for name, spec in names0.items():
        other = names1[name]
        if spec.elem_type != other.elem_type:
            raise InputDataError(
                f"input {name!r} is {spec.type_name} in the original but {other.type_name} in the candidate"
            )
