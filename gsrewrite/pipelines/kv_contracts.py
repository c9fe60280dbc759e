"""The decoder contracts as a step of ``apply``/``optimize``, after the fusions: ``shared-kv-buffer``
(:mod:`gsrewrite.pipelines.kv_buffer`), ``unpadded`` (:mod:`gsrewrite.pipelines.unpadded`) and ``int8-kv-cache``
(:mod:`gsrewrite.pipelines.kv_int8`), each opt-in
(``--contract NAME``; ``--target genai`` implies the first), each validated against the original on the inputs the
contract turns the original's into (:mod:`gsrewrite.validation.candidate_inputs`), each stated in the result, the
report and the model's ``metadata_props``. One that cannot apply (no fused attention owns the cache) is skipped
with the reason; one that disagrees is dropped with the verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import onnx

from gsrewrite.contracts import state
from gsrewrite.pipelines.decoder_signature import DecoderSignature, decoder_signature

if TYPE_CHECKING:
    from gsrewrite.validation.candidate_inputs import CandidateInputs

log = logging.getLogger(__name__)

#: the contracts this step makes, in the order it makes them (``unpadded`` after the buffer: its constant rotary
#: tables let GroupQueryAttention count positions itself)
KV_CONTRACTS = ("shared-kv-buffer", "unpadded", "int8-kv-cache")


def wanted(contracts: Sequence[str]) -> list[str]:
    """The KV-cache contracts among ``contracts``, in the order they are made."""
    return [name for name in KV_CONTRACTS if name in contracts]


def check_decoder(model: onnx.ModelProto, contracts: Sequence[str], what: str | None = None) -> None:
    """Before any work: a :class:`~gsrewrite.errors.UsageError` when KV-cache contracts are asked of a model that is
    not a decoder with a KV cache."""
    names = wanted(contracts)
    if names:
        decoder_signature(model, what or f"--contract {names[0]}")


def apply_kv_contracts(result: Any, original: onnx.ModelProto, contracts: Sequence[str], max_length: int | None,
                       validation: dict[str, Any] | None, positions: int | None = None) -> None:
    """Make ``result`` (a :class:`~gsrewrite.pipelines.RewriteResult`) follow the KV-cache contracts asked for,
    each validated against ``original`` (``validation``: the keyword arguments of a
    :class:`~gsrewrite.validation.Validator`, None: unvalidated); ``max_length``: the shared buffer's length;
    ``positions``: the longest sequence the model will run (its rotary tables then constants, when they validate;
    None: ``max_length``). A contract with several ways to make it (the int8 cache's room, the rotary tables)
    keeps the first that validates; the others are named in ``result.dropped``."""
    names = wanted(contracts)
    if not names:
        return
    signature = decoder_signature(result.model, f"--contract {names[0]}")
    seed = (validation or {}).get("seed", 0)
    model = result.model
    made: list[str] = []
    steps: list[CandidateInputs] = []
    for name in names:
        ways = _ways(name, model, signature, original, (max_length, positions or max_length, contracts), seed,
                     (validation or {}).get("tokenizer"))
        if isinstance(ways, str):
            log.warning("contract %s not applied: %s", name, ways)
            result.skipped[name] = ways
            continue
        for label, make in ways:
            candidate, step = make()
            chain = [*steps, step] if step is not None else steps
            if validation is not None:
                report = _validate(original, candidate, chain, validation, result.compressed)
                if not report.ok:
                    log.warning("contract %s dropped: %s", label, report.summary())
                    result.dropped[label] = report.summary()
                    continue
                fed = "; ".join(one.describe() for one in chain) or "the same inputs"
                log.info("contract %s validated: %s", label, fed)
                result.validation = report
            model, made, steps = candidate, [*made, name], chain
            break
    if made:
        result.model, result.serialized, result.changed = model, None, True
        result.contracts = sorted({*result.contracts, *made})
        state(result.model, result.contracts)


#: one way to make a contract: its label, and what makes the model and its validation's feed (None: the same)
Way = tuple[str, Callable[[], tuple[onnx.ModelProto, "CandidateInputs | None"]]]


def _ways(name: str, model: onnx.ModelProto, signature: DecoderSignature, original: onnx.ModelProto,
          lengths: tuple[int | None, int | None, Sequence[str]], seed: int, tokenizer: str | None = None
          ) -> list[Way] | str:
    """The ways to make ``model`` follow the contract ``name``, in the order tried; or why there is none.
    ``lengths``: the shared buffer's length, the longest sequence run and the contracts accepted; ``tokenizer``: the
    int8 cache is calibrated on real text too (validation feeds it)."""
    from gsrewrite.pipelines.kv_int8 import MARGINS, calibrate, quantize_kv_cache
    from gsrewrite.validation.candidate_inputs import QuantizedCache

    if name == "shared-kv-buffer":
        return _buffer_ways(model, signature, *lengths)
    if name == "unpadded":
        return _unpadded_ways(model, signature, lengths[1] or lengths[0] or signature.position_rows)
    largest = calibrate(model, signature, original, seed, tokenizer)
    if isinstance(largest, str):
        return largest

    def quantized(margin: float) -> Callable[[], tuple[onnx.ModelProto, CandidateInputs]]:
        def make() -> tuple[onnx.ModelProto, CandidateInputs]:
            out, scales = quantize_kv_cache(model, signature, largest, margin)
            return out, QuantizedCache(signature.pairs, scales)

        return make

    return [(f"{name} ({margin:g}x room)", quantized(margin)) for margin in MARGINS]


def _buffer_ways(model: onnx.ModelProto, signature: DecoderSignature, max_length: int | None,
                 positions: int | None, contracts: Sequence[str]) -> list[Way] | str:
    """``shared-kv-buffer``: with constant rotary tables of ``positions`` rows first (when the positions are
    bounded and the tables can be made), then as the model computes them."""
    from gsrewrite.pipelines.kv_buffer import share_kv_buffer
    from gsrewrite.pipelines.rotary_tables import MIN_ROWS, constant_rotary_tables
    from gsrewrite.validation.candidate_inputs import PaddedCache

    shared = share_kv_buffer(model, signature)
    if isinstance(shared, str):
        return shared
    feed = PaddedCache(signature.pairs, signature.input_ids, max_length)
    if positions is None:
        return [("shared-kv-buffer", lambda: (shared, feed))]
    rows = max(positions, MIN_ROWS)  # validation runs positions up to its long past: a shorter table only fails it
    made = constant_rotary_tables(shared, signature, rows, rotating_attention="unpadded-prompts" in contracts)
    if isinstance(made, str):
        log.info("shared-kv-buffer: the rotary tables stay per step: %s", made)
        return [("shared-kv-buffer", lambda: (shared, feed))]
    held = [shared]  # the tabled model, let go when the plain buffer is tried instead

    def plain() -> tuple[onnx.ModelProto, CandidateInputs]:
        again = share_kv_buffer(model, signature)
        assert not isinstance(again, str)  # it was made once already
        return again, feed

    return [(f"shared-kv-buffer (rotary tables of {rows} positions)", lambda: (held.pop(), feed)),
            ("shared-kv-buffer", plain)]


def _unpadded_ways(model: onnx.ModelProto, signature: DecoderSignature, rows: int | None) -> list[Way] | str:
    """``unpadded``: GroupQueryAttention without the mask's bias where it is proven its own causal mask up to
    ``rows`` positions (None: validation's longest past and a chunk, :data:`MIN_ROWS`)."""
    from gsrewrite.pipelines.rotary_tables import MIN_ROWS
    from gsrewrite.pipelines.unpadded import drop_padding_bias

    out = onnx.ModelProto()
    out.CopyFrom(model)
    done = drop_padding_bias(out, signature, max(rows or MIN_ROWS, MIN_ROWS))
    if isinstance(done, str):
        return done
    return [("unpadded", lambda: (out, None))]


def _validate(original: onnx.ModelProto, candidate: onnx.ModelProto, steps: list[CandidateInputs],
              validation: dict[str, Any], compressed: Any) -> Any:
    """The candidate against the original, fed through ``steps``; an int8 cache (or an earlier compression) with a
    compression's tolerance."""
    from gsrewrite.pipelines.kv_int8 import TOLERANCE
    from gsrewrite.validation.candidate_inputs import Chained, QuantizedCache
    from gsrewrite.validation.criteria import Criterion
    from gsrewrite.validation.validator import Validator

    options = {k: v for k, v in validation.items() if k not in ("min_cosine", "max_abs", "min_agreement", "min_top1")}
    if compressed is not None:
        options["criterion"] = Criterion.of(compressed.tolerance)
    elif any(isinstance(step, QuantizedCache) for step in steps):
        options["criterion"] = Criterion(**TOLERANCE)
    validator = Validator(original, candidate_inputs=Chained(steps), **options)
    return validator.check(candidate)
