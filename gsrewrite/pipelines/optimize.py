"""``optimize``: the one command most users run — simplify, then every fusion for the target, validated; then, when
asked, keep the fastest of the fusion families measured here (``tune``) and compress the result (``compress``).

The result is always compared with the *original* model (not the simplified one), so that nothing a pass or a
pattern changed goes unchecked; on a mismatch the guilty pattern is bisected and dropped, and if the rest
still disagrees the original is returned. A tuned model other than the full fusion is validated against the
original too; a compressed one with the strategy's tolerance, against the original.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import onnx

from gsrewrite.contracts import LAYOUT_CONTRACTS, state
from gsrewrite.info import op_histogram
from gsrewrite.pipelines.apply import Fusions, RewriteResult, reference_validator, rewrite, with_contracts
from gsrewrite.pipelines.genai import GENAI_TARGET, check_genai_model, with_genai_contracts
from gsrewrite.pipelines.kv_contracts import apply_kv_contracts, check_decoder, wanted
from gsrewrite.pipelines.options import CompressOptions, ModelArg, RewriteOptions, ValidateArg, validation_kwargs
from gsrewrite.pipelines.request import entered, handed_back, overlapped
from gsrewrite.pipelines.simplify import Settings, likely_to_change, run_passes
from gsrewrite.request import Request

log = logging.getLogger(__name__)


def optimize(
    model: ModelArg,
    *,
    target: str = "ort",
    device: str = "cpu",
    patterns: Sequence[str] = ("all",),
    simplify: bool = True,
    validate: ValidateArg = True,
    tune: bool = False,
    compress: str | CompressOptions | None = None,
    rewrite: RewriteOptions | None = None,
) -> RewriteResult:
    """Simplify ``model`` (folding, elimination, dedup, ...) then apply ``patterns`` for ``target`` and
    ``device`` (see :func:`gsrewrite.apply`; ``rewrite`` holds apply's other settings: pattern files, opset,
    explain, registry, contracts). ``simplify=False`` skips the cleanup passes; ``validate`` takes a
    :class:`~gsrewrite.pipelines.ValidationOptions` too. ``target="genai"``: the fusions of ``ort`` under the
    contracts onnxruntime-genai's generate loop lives with (:data:`~gsrewrite.contracts.GENAI_CONTRACTS`), for a
    decoder with a KV cache only; :func:`gsrewrite.save_genai` writes the folder the loop runs. The KV-cache
    contracts (``shared-kv-buffer``, ``int8-kv-cache``) are made last, each validated.

    ``tune``: time the result with each matched fusion family left out, and the input itself, in onnxruntime here,
    and keep the fastest (``result.tuned`` says what was timed and why one was kept). ``compress``: a compression
    strategy's name (or a :class:`~gsrewrite.pipelines.CompressOptions`) run last, validated against the input with
    the strategy's tolerance (``result.compressed``; its refusals raise as :func:`gsrewrite.compress`'s do).
    """
    start = time.perf_counter()
    genai = target == GENAI_TARGET
    if genai:  # fusions for onnxruntime, under the contracts the genai loop lives with
        target, rewrite = "ort", with_genai_contracts(rewrite or RewriteOptions())
    fusions = Fusions(tuple(patterns), target, device, rewrite or RewriteOptions())
    validation = with_contracts(validation_kwargs(validate), fusions.options)
    compression = CompressOptions.of(compress)
    if compression is not None:
        from gsrewrite.pipelines.compress import strategies, tolerance_of
        from gsrewrite.validation.criteria import Criterion

        # an unknown name, a tolerance given twice or out of its range: refused before any work
        Criterion.of(tolerance_of(strategies().get(compression.strategy), **compression.tolerance())).check()
    with entered(model, validation) as request:
        if genai:  # a model the genai loop cannot run: refused before any work
            signature = check_genai_model(request.source.model)
            fusions = dataclasses.replace(fusions, options=with_genai_contracts(fusions.options, signature))
        else:
            check_decoder(request.source.model, fusions.options.contracts)
        result = handed_back(request, _optimized(request, fusions, simplify, tune, compression))
    result.seconds = time.perf_counter() - start
    return result


def _optimized(request: Request, fusions: Fusions, simplify: bool, tune: bool, compression: CompressOptions | None
               ) -> RewriteResult:
    original, validation = request.source.model, request.options
    result = _fused(request, fusions, simplify)
    if tune:  # each variant built from the input again, not validated (the one kept is, below)
        variant = dataclasses.replace(request, source=request.source.derived(original), options=None)
        _tune(result, original, fusions.patterns, lambda names: _fused(variant, _only(fusions, names), simplify),
              validation)
    if compression is not None:
        _compress(result, original, compression, validation)
    if wanted(fusions.options.contracts):
        apply_kv_contracts(result, original, fusions.options.contracts, fusions.options.max_length, validation,
                           fusions.options.positions)
        _done(result, original)
    return result


def _fused(request: Request, fusions: Fusions, simplify: bool) -> RewriteResult:
    """The cleanup passes, then the fusions, validated (``request.options``) against the request's model."""
    source, validation = request.source, request.options
    original = source.model
    # the reference run starts before the cleanup when the model has the usual cleanup work, else as soon as a
    # cleanup pass changes something; when nothing changes, validation waits for a fusion to change something:
    # a model that nothing applies to comes back as it was, without an onnxruntime session
    pending = reference_validator(source, validation) if validation is not None else None
    request = overlapped(request, pending, simplify and likely_to_change(original))
    try:
        working, passes, graph, records = _simplified(request) if simplify else (original, {}, None, [])
        # the cleanup's graph goes to the fusion pass as it is (no import of ``working`` again); ``working`` is
        # what bisection rebuilds from and what comes back when no fusion applies
        result = rewrite(request, fusions, working=source.derived(working), pending=pending, graph=graph)
    except BaseException:  # the reference run must not outlive a failed call either
        if pending is not None:
            pending.join()
        raise
    if result.model is not original:  # the cleanup's changes are in the result (none when it fell back)
        result.passes, result.pass_records = passes, records
    return result


def _simplified(request: Request) -> tuple[onnx.ModelProto, dict[str, int], Any, list[Any]]:
    """The request's model simplified (the model itself when no pass changed anything), the changes per pass, the
    simplified graph (None with the model itself) and the pattern passes' match records; not validated here
    (optimize validates its end result)."""
    from gsrewrite.validation.runner import unvalidated_inner_step

    model = request.source.model
    with unvalidated_inner_step():
        result = run_passes(model, Settings(), request)
    return (result.model, dict(result.counts), result.graph, result.records) if result.changed \
        else (model, {}, None, [])


def _only(fusions: Fusions, names: list[str]) -> Fusions:
    """``fusions`` with just the patterns ``names`` (no near misses recorded)."""
    return dataclasses.replace(fusions, patterns=tuple(names), options=dataclasses.replace(fusions.options,
                                                                                            explain=False))


def _tune(result: RewriteResult, original: onnx.ModelProto, patterns: Sequence[str],
          without: Callable[[list[str]], RewriteResult], validation: dict[str, Any] | None) -> None:
    """Keep the fastest candidate (:mod:`gsrewrite.pipelines.tune`); one other than the full fusion takes over the
    result, validated against the original."""
    from gsrewrite.pipelines.tune import tune

    built: dict[int, RewriteResult] = {}

    def build(names: list[str]) -> onnx.ModelProto:
        variant = without(names)
        built[id(variant.model)] = variant
        return variant.model

    tuned = tune(original, result.model, dict(result.counts), patterns, build)
    result.tuned = tuned
    if tuned.model is result.model:
        return
    kept = built.get(id(tuned.model))
    result.model, result.serialized = tuned.model, None
    result.counts, result.records, result.passes, result.pass_records = \
        (dict(kept.counts), kept.records, kept.passes, kept.pass_records) if kept else ({}, [], {}, [])
    if validation is not None and tuned.model is not original:
        from gsrewrite.errors import ValidationError
        from gsrewrite.validation import validate

        result.validation = validate(original, tuned.model, **validation)
        if not result.validation.ok:
            raise ValidationError(f"the tuned model ({tuned.kept}) disagrees with the input: "
                                  f"{result.validation.summary()}")
    _done(result, original)


def _compress(result: RewriteResult, original: onnx.ModelProto, compression: CompressOptions,
              validation: dict[str, Any] | None) -> None:
    """The strategy on the fused model, its outputs compared with the original's."""
    from gsrewrite.pipelines.compress import compress

    given = validation or {}
    # a weightless model as it is: compress reads the references in for a strategy that does not read them itself
    compressed = compress(result.model, compression.strategy, reference=original,
                          validate=validation is not None, inputs=given.get("inputs"),
                          input_shapes=given.get("input_shapes"), bench_runs=0,
                          contracts=given.get("contracts", ()), **compression.kwargs())
    result.compressed = compressed
    result.model, result.serialized = compressed.model, None
    # its validation tried only the inputs the accepted contracts keep: the compressed model is stated under them
    # (fp16 of GroupQueryAttention differs from the original at fully masked query rows, unpadded-queries' rows)
    assumed = [name for name in given.get("contracts", ()) if name not in LAYOUT_CONTRACTS]
    if validation is not None and set(assumed) - set(result.contracts):
        result.contracts = sorted({*result.contracts, *assumed})
        state(result.model, result.contracts)
    _done(result, original)


def _done(result: RewriteResult, original: onnx.ModelProto) -> None:
    """The result's model was replaced after the fusions: what changed is counted against the original again."""
    result.changed = result.model is not original
    result.after = op_histogram(result.model)
