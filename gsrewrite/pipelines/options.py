"""``ValidationOptions``: how ``apply``, ``optimize`` and ``simplify`` compare their result with the original."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ValidationOptions:
    """The settings of :func:`gsrewrite.validate` used to check a result (see its documentation).

    ``inputs``: input arrays (an ``.npz`` path or a mapping) instead of generated inputs; ``input_shapes``: shapes
    of generated inputs or sizes of symbolic dims; ``runs``: random input sets; ``atol``/``rtol``: tolerances;
    ``seed``: of the generated inputs; ``providers``: onnxruntime execution providers; ``max_memory``: memory
    budget of a reference run (bytes or ``"2GB"``).
    """

    inputs: Any = None
    input_shapes: Mapping[str, Any] | None = None
    runs: int = 1
    atol: float = 1e-4
    rtol: float = 1e-3
    seed: int = 0
    providers: Sequence[str] | None = None
    max_memory: int | str | None = None

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`gsrewrite.validate` (unset ones left out)."""
        defaults = ValidationOptions()
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(defaults, f.name)}


#: What the ``validate`` parameter of ``apply``/``optimize``/``simplify`` accepts.
ValidateArg = bool | ValidationOptions | Mapping[str, Any]


def validation_kwargs(validate: ValidateArg) -> dict[str, Any] | None:
    """``validate`` as keyword arguments for :func:`gsrewrite.validate`; None when validation is off.

    ``True``: the defaults; ``False``: no validation; a :class:`ValidationOptions` (or a mapping of its fields,
    as the CLI collects them): validate with those settings."""
    if validate is True:
        return {}
    if validate is False:
        return None
    if isinstance(validate, ValidationOptions):
        return validate.kwargs()
    if isinstance(validate, Mapping):
        return {k: v for k, v in validate.items() if v is not None}
    raise TypeError(f"validate must be a bool or ValidationOptions, not {type(validate).__name__}")
