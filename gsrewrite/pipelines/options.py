"""What ``apply``, ``optimize`` and ``simplify`` take: the model (``ModelArg``, read into the model handle,
:class:`~gsrewrite.model_io.source.Source`) and the settings that travel together, as dataclasses.

``ValidationOptions``: how a result is compared with the original; ``RewriteOptions``: the pattern rewrite's
settings besides target, device and patterns (``apply``'s keywords of the same names, grouped for ``optimize``);
``CompressOptions``: the compression ``optimize`` runs last.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gsrewrite.errors import UsageError
from gsrewrite.model_io.source import ModelArg as ModelArg  # the entries' model argument, in its handle
from gsrewrite.model_io.source import Source as Source

if TYPE_CHECKING:
    from gsrewrite.patterns.registry import PatternRegistry
    from gsrewrite.shapes.input_shapes import ShapeSpec


@dataclass(frozen=True)
class ValidationOptions:
    """The settings of :func:`gsrewrite.validate` used to check a result (see its documentation).

    ``inputs``: input arrays (an ``.npz`` path or a mapping) instead of generated inputs; ``input_shapes``: shapes
    of generated inputs or sizes of symbolic dims; ``runs``: random input sets; ``atol``/``rtol``: tolerances;
    ``seed``: of the generated inputs; ``providers``: onnxruntime execution providers; ``max_memory``: memory
    budget of a reference run (bytes or ``"2GB"``); ``noise_factor``: how many times the model's own noise
    (onnxruntime's optimized against unoptimized run) an output may move where that is over ``atol`` (0: never).
    """

    inputs: Any = None
    input_shapes: ShapeSpec | None = None
    runs: int = 1
    atol: float = 1e-4
    rtol: float = 1e-3
    seed: int = 0
    providers: Sequence[str] | None = None
    max_memory: int | str | None = None
    noise_factor: float = 8.0
    #: a tokenizer folder (``tokenizer.json``): token-id inputs are real text (:mod:`gsrewrite.validation.text`)
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or self.seed < 0:  # checked before any work (numpy's rule)
            raise UsageError(f"--seed must be a non-negative integer, got {self.seed!r}")

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


@dataclass(frozen=True)
class RewriteOptions:
    """How the pattern rewrite runs, besides target, device and patterns: ``pattern_files`` adds pattern files
    (their patterns always selected), ``opset`` converts the model first, ``explain`` records each pattern's
    deepest near miss, ``registry`` replaces the registered patterns."""

    pattern_files: Sequence[str | os.PathLike] = ()
    opset: int | None = None
    explain: bool = False
    registry: PatternRegistry | None = None
    #: input contracts the user accepts for faster fused ops (:mod:`gsrewrite.contracts`; none by default)
    contracts: Sequence[str] = ()
    #: ``shared-kv-buffer``: the buffer's length (positions), what validation pads the past to; None: just
    #: longer than each validation input needs
    max_length: int | None = None
    #: ``shared-kv-buffer``: the longest sequence the model will run (every position id below it); the rotary
    #: tables become constants of that many rows (:mod:`gsrewrite.pipelines.rotary_tables`). None: ``max_length``
    #: (``--target genai``: the context length its folder states)
    positions: int | None = None

    def __post_init__(self) -> None:
        from gsrewrite.contracts import check_contracts

        # known names only, each with the narrower contracts it implies (``unpadded``: unpadded-prompts, ...)
        object.__setattr__(self, "contracts", check_contracts(self.contracts))


#: the tolerance overrides a compression takes (keyword names of :func:`gsrewrite.compress`)
TOLERANCE_FIELDS = ("min_cosine", "max_abs", "min_agreement", "min_top1")


@dataclass(frozen=True)
class CompressOptions:
    """A compression run after the fusions: the strategy's name, its own options (keyword arguments of
    :func:`gsrewrite.compress` such as ``block_size``) and the overrides of its tolerance, as ``compress`` takes
    them: ``min_cosine``, ``max_abs``, ``min_agreement``, ``min_top1`` (None: the strategy's value)."""

    strategy: str
    options: Mapping[str, Any] = field(default_factory=dict)
    min_cosine: float | None = None
    max_abs: float | None = None
    min_agreement: float | None = None
    min_top1: float | None = None

    @classmethod
    def of(cls, compress: str | CompressOptions | None) -> CompressOptions | None:
        """``optimize``'s ``compress`` argument: a strategy name, the options, or None."""
        return CompressOptions(compress) if isinstance(compress, str) else compress

    def tolerance(self) -> dict[str, Any]:
        """The tolerance overrides given (as fields or, as before, in ``options``) by ``compress``'s keyword names;
        one given both ways is a :class:`~gsrewrite.errors.UsageError`."""
        fields = {name: getattr(self, name) for name in TOLERANCE_FIELDS if getattr(self, name) is not None}
        listed = {name: self.options[name] for name in TOLERANCE_FIELDS if self.options.get(name) is not None}
        twice = sorted(set(fields) & set(listed))
        if twice:
            from gsrewrite.errors import UsageError

            raise UsageError(f"CompressOptions: {twice[0]} is given twice (as a field and in options)")
        return {**listed, **fields}

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`gsrewrite.compress` besides the model and the strategy."""
        return {**self.options, **self.tolerance()}
