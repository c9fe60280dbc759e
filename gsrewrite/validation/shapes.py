"""Concrete shapes for generated inputs: user shape specs, symbolic dims, and the defaults.

Rules (see ``docs/validation.md``):

* ``{"input_ids": (1, 128)}`` (``--input-shape input_ids:1x128``) fixes a whole input; its symbolic dims
  (``batch``, ``sequence``) are bound for every other input that uses the same names.
* ``{"batch": 2}`` (``batch=2``) binds a symbolic dim name wherever it appears. A name that is neither an input
  nor a dim name of the model is an error (:func:`gsrewrite.shapes.input_shapes.check_names`).
* Other dynamic dims: **2** when batch-like (the name contains ``batch``, or it is the first dim of an
  input of rank >= 2 and its name does not look like a sequence: ``seq``, ``len``, ``time``, ``step``,
  ``token``), **16** otherwise. One symbolic name gets one size across all inputs. When the original model
  rejects inputs of that size (a convolution wider than 16 samples), the validator retries with 256 and 4096
  (:data:`GROWN_DEFAULTS`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gsrewrite.errors import InputDataError
from gsrewrite.shapes.input_shapes import ShapeSpec, as_input_shapes, check_names
from gsrewrite.validation.signature import Dim, InputSpec

#: Default size of a batch-like dynamic dim (2 rather than 1, so that batch mix-ups show).
BATCH_DEFAULT = 2
#: Default size of any other dynamic dim (sequence length, spatial size, ...).
OTHER_DEFAULT = 16
#: Sizes tried, in turn, for the other dynamic dims while the original rejects the generated inputs.
GROWN_DEFAULTS = (OTHER_DEFAULT, 256, 4096)
_SEQUENCE_WORDS = ("seq", "len", "time", "step", "token")


def resolve_shapes(specs: Sequence[InputSpec], input_shapes: ShapeSpec | None = None,
                   other: int = OTHER_DEFAULT) -> dict[str, tuple[int, ...]]:
    """A concrete shape for every input: from ``input_shapes`` where given, else by the default rules (with
    ``other`` as the size of dynamic dims that are not batch-like)."""
    whole, bound = _split_user_shapes(specs, input_shapes or {})
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        if spec.name in whole:
            shapes[spec.name] = _explicit_shape(spec, whole[spec.name], bound)
    for spec in specs:
        if spec.name not in shapes:
            shapes[spec.name] = _default_shape(spec, bound, other)
    return {spec.name: shapes[spec.name] for spec in specs}


def _split_user_shapes(
    specs: Sequence[InputSpec], input_shapes: ShapeSpec
) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """The caller's whole input shapes (as sizes) and dim sizes, every name checked against the model's."""
    given = as_input_shapes(input_shapes)
    dim_names = {d for s in specs for d in (s.dims or ()) if isinstance(d, str)}
    check_names(given, [s.name for s in specs], dim_names)
    return {name: given.sizes(name) for name in given.shapes}, dict(given.bindings)


def _explicit_shape(spec: InputSpec, shape: tuple[int, ...], bound: dict[str, int]) -> tuple[int, ...]:
    if spec.dims is None:
        return shape
    if len(shape) != len(spec.dims):
        raise InputDataError(f"shape {list(shape)} given for {spec.describe()} has the wrong rank")
    for dim, size in zip(spec.dims, shape, strict=True):
        _bind(spec, dim, size, bound)
    return shape


def _bind(spec: InputSpec, dim: Dim, size: int, bound: dict[str, int]) -> None:
    if isinstance(dim, int) and dim != size:
        raise InputDataError(f"size {size} given for {spec.describe()} contradicts its fixed dim {dim}")
    if isinstance(dim, str) and bound.setdefault(dim, size) != size:
        raise InputDataError(f"dim {dim!r} of input {spec.name!r} is given as both {bound[dim]} and {size}")


def _default_shape(spec: InputSpec, bound: dict[str, int], other: int = OTHER_DEFAULT) -> tuple[int, ...]:
    if spec.dims is None:
        raise InputDataError(f"input {spec.name!r} has no shape in the model; give one (--input-shape NAME:1x128)")
    shape = []
    for position, dim in enumerate(spec.dims):
        if isinstance(dim, int):
            shape.append(dim)
        elif dim is not None and dim in bound:
            shape.append(bound[dim])
        else:
            size = default_dim(dim, position, len(spec.dims), other)
            if dim is not None:
                bound[dim] = size
            shape.append(size)
    return tuple(shape)


def default_dim(name: str | None, position: int, rank: int, other: int = OTHER_DEFAULT) -> int:
    """The default size of a dynamic dim: :data:`BATCH_DEFAULT` if batch-like, else ``other``."""
    lowered = (name or "").lower()
    if "batch" in lowered:
        return BATCH_DEFAULT
    if position == 0 and rank >= 2 and not any(word in lowered for word in _SEQUENCE_WORDS):
        return BATCH_DEFAULT
    return other
