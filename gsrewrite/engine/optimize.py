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

from gsrewrite.engine.apply import ModelArg, RewriteResult, _as_model, reference_validator, rewrite_model
from gsrewrite.patterns.registry import PatternRegistry

log = logging.getLogger(__name__)


def optimize(
    model: ModelArg,
    *,
    target: str = "ort",
    device: str = "cpu",
    patterns: Sequence[str] = ("all",),
    opset: int | None = None,
    simplify: bool = True,
    validate: bool = True,
    explain: bool = False,
    validation_options: dict[str, Any] | None = None,
    simplify_options: dict[str, Any] | None = None,
    registry: PatternRegistry | None = None,
    source_path: str | os.PathLike | None = None,
    on_serialized: Callable[[onnx.ModelProto, bytes], None] | None = None,
) -> RewriteResult:
    """Simplify ``model`` (folding, elimination, dedup, ...) then apply ``patterns`` for ``target`` and
    ``device`` (see :func:`gsrewrite.engine.apply`).

    ``source_path``: the file ``model`` was read from, unchanged; ``on_serialized``: called with each candidate
    validation serialized (see :func:`gsrewrite.engine.apply`).
    """
    original = _as_model(model)
    if source_path is None and isinstance(model, (str, os.PathLike)):
        source_path = model
    # the reference run starts before the cleanup when the model has the usual cleanup work, else as soon as a
    # cleanup pass changes something; when nothing changes, validation waits for a fusion to change something:
    # a model that nothing applies to comes back as it was, without an onnxruntime session
    from gsrewrite.simplifier.pipeline import likely_to_change

    reference_run = reference_validator(original, validation_options, source_path) if validate else None
    if reference_run is not None and simplify and likely_to_change(original):
        reference_run.start()  # at once: overlaps all of the cleanup
    try:
        working = _simplified(original, simplify_options or {},
                              reference_run.start if reference_run is not None else None) if simplify else original
        return rewrite_model(working, patterns, target=target, device=device, validate=validate, explain=explain,
                             opset=opset, registry=registry, validation_options=validation_options,
                             reference=original if working is not original else None, source_path=source_path,
                             eager_validation=working is not original,
                             pending=reference_run if reference_run is not None and reference_run.started else None,
                             on_serialized=on_serialized)
    except BaseException:  # the reference run must not outlive a failed call either
        if reference_run is not None:
            reference_run.join()
        raise


def _simplified(model: onnx.ModelProto, options: dict[str, Any],
                on_change: Callable[[], None] | None = None) -> onnx.ModelProto:
    """The simplified model, or ``model`` itself when no pass changed anything."""
    try:
        from gsrewrite.simplifier import simplify
    except ImportError:  # pragma: no cover - simplify ships with gsrewrite; a partial install lacks it
        log.warning("gsrewrite.simplify is not available: optimizing without the cleanup passes")
        return model
    from gsrewrite.validation.runner import unvalidated_inner_step

    with unvalidated_inner_step():  # optimize validates (or warns) at its end
        result = simplify(model, validate=False, on_change=on_change, **options)
    return result.model if result.changed else model
