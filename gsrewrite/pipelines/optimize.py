"""``optimize``: the one command most users run — simplify, then every fusion for the target, validated.

The result is always compared with the *original* model (not the simplified one), so that nothing a pass or a
pattern changed goes unchecked; on a mismatch the guilty pattern is bisected and dropped, and if the rest
still disagrees the original is returned.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import onnx

from gsrewrite.patterns.registry import PatternRegistry
from gsrewrite.pipelines.apply import (
    ModelArg,
    OnSerialized,
    RewriteResult,
    _as_model,
    reference_validator,
    rewrite_model,
)
from gsrewrite.pipelines.options import ValidateArg, validation_kwargs
from gsrewrite.pipelines.simplify import likely_to_change, simplify_model

log = logging.getLogger(__name__)


def optimize(
    model: ModelArg,
    *,
    target: str = "ort",
    device: str = "cpu",
    patterns: Sequence[str] = ("all",),
    opset: int | None = None,
    simplify: bool = True,
    validate: ValidateArg = True,
    explain: bool = False,
    registry: PatternRegistry | None = None,
) -> RewriteResult:
    """Simplify ``model`` (folding, elimination, dedup, ...) then apply ``patterns`` for ``target`` and
    ``device`` (see :func:`gsrewrite.apply`; ``validate`` takes a :class:`~gsrewrite.pipelines.ValidationOptions`
    too). ``simplify=False`` skips the cleanup passes."""
    source_path = model if isinstance(model, (str, os.PathLike)) else None
    return optimize_model(_as_model(model), target=target, device=device, patterns=patterns, opset=opset,
                          simplify=simplify, validation=validation_kwargs(validate), explain=explain,
                          registry=registry, source_path=source_path)


def optimize_model(original: onnx.ModelProto, *, validation: dict[str, Any] | None, target: str = "ort",
                   device: str = "cpu", patterns: Sequence[str] = ("all",), opset: int | None = None,
                   simplify: bool = True, explain: bool = False, registry: PatternRegistry | None = None,
                   simplify_options: dict[str, Any] | None = None, source_path: str | os.PathLike | None = None,
                   on_serialized: OnSerialized | None = None) -> RewriteResult:
    """:func:`optimize` on a loaded model (the CLI's entry point). ``validation``: keyword arguments of
    :func:`gsrewrite.validate`, None for none; ``simplify_options``: keyword arguments of ``simplify_model``;
    ``source_path`` and ``on_serialized``: see :func:`gsrewrite.pipelines.apply.rewrite_model`."""
    # the reference run starts before the cleanup when the model has the usual cleanup work, else as soon as a
    # cleanup pass changes something; when nothing changes, validation waits for a fusion to change something:
    # a model that nothing applies to comes back as it was, without an onnxruntime session
    reference_run = reference_validator(original, validation, source_path) if validation is not None else None
    if reference_run is not None and simplify and likely_to_change(original):
        reference_run.start()  # at once: overlaps all of the cleanup
    try:
        working, passes = (_simplified(original, simplify_options or {},
                                       reference_run.start if reference_run is not None else None)
                           if simplify else (original, {}))
        result = rewrite_model(working, patterns, target=target, device=device, validation=validation,
                               explain=explain, opset=opset, registry=registry,
                               reference=original if working is not original else None, source_path=source_path,
                               eager_validation=working is not original,
                               pending=reference_run if reference_run is not None and reference_run.started
                               else None, on_serialized=on_serialized)
    except BaseException:  # the reference run must not outlive a failed call either
        if reference_run is not None:
            reference_run.join()
        raise
    if result.model is not original:  # the cleanup's changes are in the result (none when it fell back)
        result.passes = passes
    return result


def _simplified(model: onnx.ModelProto, options: dict[str, Any],
                on_change: Callable[[], None] | None = None) -> tuple[onnx.ModelProto, dict[str, int]]:
    """The simplified model (``model`` itself when no pass changed anything) and the changes per pass."""
    from gsrewrite.validation.runner import unvalidated_inner_step

    with unvalidated_inner_step():  # optimize validates (or warns) at its end
        result = simplify_model(model, validation=None, on_change=on_change, **options)
    return (result.model, dict(result.counts)) if result.changed else (model, {})
