"""The ``int8-kv-cache`` contract: the past and present as int8, GroupQueryAttention's quantized cache
(``k_quant_type``/``v_quant_type`` ``PER_CHANNEL``, ``kv_cache_bit_width`` 8, ``k_scale``/``v_scale`` inputs; the CPU
kernel of onnxruntime >= 1.31 runs it).

The scales are fixed in the model, one per KV head and channel of each layer's keys and values: the original's
own prefill of :data:`CALIBRATION_TOKENS` random token ids gives each channel's largest magnitude, with room above
it (a value beyond is clipped). Random ids understate real text: SmolLM2's keys and values after its chat prompt
reach 3.6x the largest of a 64-token random prefill. So with a tokenizer (``--tokenizer``, which also makes
validation feed real text) a prefill of :data:`TEXT_TOKENS` tokens of text is calibrated on too. The room is tried
in the order of :data:`MARGINS`, the first whose result validates kept (headroom first, for text the calibration
did not show; then the finer 1.25x; then 2x between them): on SmolLM2 with real-text validation, random-only
calibration validated at no room (2.5x: logits cosine 0.94 on a prefill; 1.25x: 14 outputs off); with text
calibrated too, 2x validates (2.5x misses a prefill's logits at cosine 0.947, 1.25x one present at 0.98899);
without a tokenizer SmolLM2 validates at 2.5x and the tiny test decoder at 1.25x. The cache takes a quarter of
the float32 memory; the outputs move by int8 rounding, so the result is validated with a compression's
tolerance (:data:`TOLERANCE`), never with float32's, and a model no room fits is dropped with the verdict.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gsrewrite.pipelines.decoder_signature import DecoderSignature
from gsrewrite.pipelines.kv_buffer import cache_attention
from gsrewrite.validation.signature import model_inputs

log = logging.getLogger(__name__)

#: token ids the calibration prefill runs (batch 1)
CALIBRATION_TOKENS = 64
#: real text's tokens the calibration prefill also runs when a tokenizer is given (validation then feeds text too)
TEXT_TOKENS = 256
#: the room above a channel's largest calibrated magnitude, in the order tried (see the module docstring)
MARGINS = (2.5, 1.25, 2.0)
#: what the validation of an int8 cache holds it to (validate's keyword arguments): compression's int8 tolerance
TOLERANCE = {"min_cosine": 0.99, "min_agreement": 0.98, "min_top1": 0.98}
_K_SCALE, _V_SCALE = 12, 13  # GroupQueryAttention's k_scale and v_scale inputs


def calibrate(model: onnx.ModelProto, signature: DecoderSignature, reference: onnx.ModelProto,
              seed: int = 0, tokenizer: str | None = None) -> dict[str, np.ndarray] | str:
    """The largest magnitude of each past input's channels ([1, kv_heads, 1, head_size]) after ``reference``'s (the
    original's) prefill of random token ids, and of real text too when ``tokenizer`` (a folder with
    ``tokenizer.json``) is given; or why ``model``'s cache cannot be quantized."""
    attention = cache_attention(model, signature)
    if isinstance(attention, str):
        return attention
    largest = _calibrate(reference, signature, seed)
    if tokenizer is None or isinstance(largest, str):
        return largest
    from gsrewrite.validation.text import text_tokens

    stream = text_tokens(tokenizer)
    stream = stream[stream < signature.vocab_size][:TEXT_TOKENS]
    if not stream.size:
        return largest
    text = _calibrate(reference, signature, seed, stream)
    if isinstance(text, str):
        return text
    return {past: np.maximum(value, text[past]) for past, value in largest.items()}


def quantize_kv_cache(model: onnx.ModelProto, signature: DecoderSignature, largest: dict[str, np.ndarray],
                      margin: float) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``model`` (a copy) with an int8 cache, and the scales of each past input: ``margin`` times the
    largest magnitude :func:`calibrate` found, over 127."""
    calibrated = {past: (value * margin / 127).astype(np.float32) for past, value in largest.items()}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    producers = {o: node for node in out.graph.node for o in node.output}
    for layer in signature.layers:
        node = producers[layer.present_key]
        inputs = list(node.input) + [""] * max(0, _K_SCALE - len(node.input))
        names = [f"{layer.past_key}_scale", f"{layer.past_value}_scale"]
        inputs[_K_SCALE:_V_SCALE + 1] = names
        del node.input[:]
        node.input.extend(inputs)
        kept = [a for a in node.attribute if a.name not in ("k_quant_type", "v_quant_type", "kv_cache_bit_width")]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("k_quant_type", "PER_CHANNEL"),
                               helper.make_attribute("v_quant_type", "PER_CHANNEL"),
                               helper.make_attribute("kv_cache_bit_width", 8)])
        for name, past in zip(names, (layer.past_key, layer.past_value), strict=True):
            out.graph.initializer.append(numpy_helper.from_array(calibrated[past], name))
    cache = set(signature.pairs) | set(signature.pairs.values())
    for value in [*out.graph.input, *out.graph.output]:
        if value.name in cache:
            value.type.tensor_type.elem_type = onnx.TensorProto.INT8
    log.info("int8-kv-cache: %d layer(s) quantized, scales from a prefill of %d tokens with %gx room",
             len(signature.layers), CALIBRATION_TOKENS, margin)
    return out, calibrated


def _calibrate(reference: onnx.ModelProto, signature: DecoderSignature, seed: int,
               ids: np.ndarray | None = None) -> dict[str, np.ndarray] | str:
    """Each past input's per-channel largest magnitude in the reference's presents after a prefill of random ids
    (or of ``ids``, one row)."""
    from gsrewrite.errors import GsrewriteError
    from gsrewrite.validation.runner import run_once

    specs = {spec.name: spec for spec in model_inputs(reference)}
    known = {signature.input_ids, signature.attention_mask, signature.position_ids, *signature.pairs}
    other = sorted(set(specs) - known)
    if other:
        return f"cannot calibrate the scales: the prefill needs the input(s) {', '.join(other)}"
    rng = np.random.default_rng(seed)
    tokens = CALIBRATION_TOKENS if ids is None else int(ids.size)
    drawn = rng.integers(0, signature.vocab_size, (1, tokens)) if ids is None else ids.reshape(1, -1)
    feed = {signature.input_ids: drawn.astype(specs[signature.input_ids].dtype)}
    if signature.attention_mask is not None:
        feed[signature.attention_mask] = np.ones((1, tokens), specs[signature.attention_mask].dtype)
    if signature.position_ids is not None:
        feed[signature.position_ids] = np.arange(tokens)[None].astype(specs[signature.position_ids].dtype)
    for past in signature.pairs:
        feed[past] = np.zeros((1, signature.kv_heads, 0, signature.head_size), specs[past].dtype)
    try:
        presents = run_once(reference, feed)
    except GsrewriteError as exc:
        return f"the calibration prefill failed: {str(exc).splitlines()[0]}"
    return {past: np.maximum(np.abs(np.asarray(presents[present], dtype=np.float32)).max(axis=(0, 2), keepdims=True),
                             1e-6) for past, present in signature.pairs.items()}
