"""Inputs given by the user (a dict of arrays or an ``.npz`` file), checked against the model's signature.

Names must match the model's inputs exactly (every required input present, no unknown names). Ranks and
fixed dims must match. Dtypes are converted when that is safe: numpy's "safe" casts, narrowing between
float types (float64 -> float32), and any other numeric conversion that keeps every value exactly
(int64 -> int32 for small values, 1.0 -> 1); anything else is an :class:`InputDataError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gsrewrite.errors import InputDataError
from gsrewrite.validation.npz_files import load_npz
from gsrewrite.validation.signature import InputSpec

__all__ = ["InputSource", "describe_given", "load_npz", "prepare_inputs"]

InputSource = Mapping[str, Any] | str | os.PathLike


def prepare_inputs(source: InputSource, specs: Sequence[InputSpec], budget: int | None = None
                   ) -> dict[str, np.ndarray]:
    """The given inputs as a feed dict in model order, checked and converted to the model's dtypes. A path is
    read by :func:`~gsrewrite.validation.npz_files.load_npz` (sized from its headers against ``budget`` first)."""
    arrays = load_npz(source, budget=budget) if isinstance(source, (str, os.PathLike)) else dict(source)
    _check_names(list(arrays), [s.name for s in specs])
    return {spec.name: _fit(spec, np.asarray(arrays[spec.name])) for spec in specs}


def _check_names(given: list[str], expected: list[str]) -> None:
    missing = [name for name in expected if name not in given]
    unknown = sorted(set(given) - set(expected))
    problems = []
    if missing:
        problems.append(f"missing input(s) {', '.join(missing)}")
    if unknown:
        problems.append(f"unknown input name(s) {', '.join(unknown)}")
    if problems:
        raise InputDataError("; ".join(problems) + f" (the model's inputs: {', '.join(expected) or '-'})")


def describe_given(feed: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Shape, dtype and source of given inputs, for the report."""
    return {
        name: {"shape": list(array.shape), "dtype": str(array.dtype), "source": "given"} for name, array in feed.items()
    }


def _fit(spec: InputSpec, array: np.ndarray) -> np.ndarray:
    _check_shape(spec, array.shape)
    return _convert(spec, array)


def _check_shape(spec: InputSpec, shape: tuple[int, ...]) -> None:
    if spec.dims is None:
        return
    if len(shape) != len(spec.dims):
        raise InputDataError(f"input {spec.name!r} has shape {list(shape)}, the model expects {spec.describe()}")
    for dim, size in zip(spec.dims, shape, strict=True):
        if isinstance(dim, int) and dim != size:
            raise InputDataError(f"input {spec.name!r} has shape {list(shape)}, which contradicts {spec.describe()}")


def _convert(spec: InputSpec, array: np.ndarray) -> np.ndarray:
    dtype = spec.dtype
    if array.dtype == dtype:
        return array
    if dtype.kind == "O" and array.dtype.kind in "US":  # string inputs
        return array.astype(object)
    numeric = array.dtype.kind in "biuf" and dtype.kind in "biuf"
    if numeric and (np.can_cast(array.dtype, dtype, "safe") or array.dtype.kind == dtype.kind == "f"):
        return array.astype(dtype)
    if numeric:
        with np.errstate(all="ignore"):
            converted = array.astype(dtype)
            lossless = np.array_equal(converted.astype(array.dtype), array, equal_nan=array.dtype.kind == "f")
        if lossless:
            return converted
    raise InputDataError(
        f"input {spec.name!r} has dtype {array.dtype}, the model expects {spec.type_name} "
        f"({dtype}) and the values do not convert exactly"
    )
