"""What a decoder with a KV cache takes and returns, read from its graph: the token ids, mask and position inputs,
the past -> present pairs of every layer (as name templates ``past_key_values.%d.key``), the logits, the cache's
head count and head size. onnxruntime-genai's config (:mod:`gsrewrite.pipelines.genai`) and the KV-cache contracts
(:mod:`gsrewrite.pipelines.kv_buffer`, :mod:`gsrewrite.pipelines.kv_int8`) are written from it.

A model that is not such a decoder is a :class:`~gsrewrite.errors.UsageError` naming what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from gsrewrite.errors import UsageError
from gsrewrite.validation.dims import input_dims
from gsrewrite.validation.prefill import prefill_plan
from gsrewrite.validation.signature import InputSpec, model_inputs


@dataclass(frozen=True)
class CacheLayer:
    """One layer's cache: the past inputs and the present outputs they are fed back from."""

    past_key: str
    past_value: str
    present_key: str
    present_value: str


@dataclass(frozen=True)
class DecoderSignature:
    """A decoder's inputs and outputs as a generate loop feeds and reads them."""

    input_ids: str
    attention_mask: str | None
    position_ids: str | None
    layers: tuple[CacheLayer, ...]
    #: name templates with ``%d`` for the layer: past key/value inputs, present key/value outputs
    templates: dict[str, str]
    logits: str
    vocab_size: int
    kv_heads: int
    head_size: int
    #: the rows of the smallest table the position inputs index (the longest context), None without one
    position_rows: int | None

    @property
    def pairs(self) -> dict[str, str]:
        """Past input -> the present output it is fed back from, every layer."""
        return {past: present for layer in self.layers
                for past, present in ((layer.past_key, layer.present_key), (layer.past_value, layer.present_value))}


def decoder_signature(model: onnx.ModelProto, what: str = "a KV-cache option") -> DecoderSignature:
    """``model``'s :class:`DecoderSignature`; :class:`UsageError` (``what`` needs ...) for a model that is not a
    decoder with a KV cache in onnxruntime-genai's layout."""
    specs = model_inputs(model)
    dims = input_dims(model, None, specs)
    plan = prefill_plan(model, dims)
    if plan is None or not plan.pairs:
        raise UsageError(f"{what} needs a decoder with a KV cache (past inputs fed back from present outputs); "
                         "this model has none")
    by_name = {spec.name: spec for spec in specs}
    keys = sorted(past for past in plan.pairs if _kind(past) == "key")
    values = sorted(past for past in plan.pairs if _kind(past) == "value")
    if len(keys) != len(values) or len(keys) + len(values) != len(plan.pairs):
        raise UsageError(f"{what}: cannot tell the key cache from the value cache among the past inputs "
                         f"({', '.join(sorted(plan.pairs))}): their names should say key or value")
    templates = {"past_key_names": _template(keys, what), "past_value_names": _template(values, what)}
    key, value = templates["past_key_names"], templates["past_value_names"]
    layers = tuple(CacheLayer(key % i, value % i, plan.pairs[key % i], plan.pairs[value % i])
                   for i in range(len(keys)))
    templates["present_key_names"] = _template([layer.present_key for layer in layers], what)
    templates["present_value_names"] = _template([layer.present_value for layer in layers], what)
    kv_heads, head_size = _cache_shape(by_name[layers[0].past_key], what)
    ids = _token_ids(specs, plan.new, plan.positions, plan.mask, what)
    logits, vocab = _logits(model, set(plan.pairs.values()), what)
    rows = [r for name, r in dims.position_rows.items() if r and name in plan.positions]
    return DecoderSignature(ids, plan.mask, plan.positions[0] if plan.positions else None, layers, templates,
                            logits, vocab, kv_heads, head_size, min(rows) if rows else None)


def _kind(name: str) -> str | None:
    """``key`` or ``value``: the last such word in the name (``past_key_values.0.value`` is a value)."""
    for word in reversed(re.split(r"[^a-z]+", name.lower())):
        if word in ("key", "k"):
            return "key"
        if word in ("value", "v"):
            return "value"
    return None


def _template(names: Sequence[str], what: str) -> str:
    """The ``%d`` template that gives ``names`` for the layers 0 .. n-1 (in some order)."""
    for match in re.finditer(r"\d+", names[0]):
        template = names[0][:match.start()] + "%d" + names[0][match.end():]
        if {template % i for i in range(len(names))} == set(names):
            return template
    raise UsageError(f"{what}: the cache names ({', '.join(names[:3])}, ...) do not number the layers 0 .. "
                     f"{len(names) - 1} in one place")


def _cache_shape(spec: InputSpec, what: str) -> tuple[int, int]:
    dims = spec.dims or ()
    if len(dims) != 4 or not isinstance(dims[1], int) or not isinstance(dims[3], int):
        raise UsageError(f"{what}: the past input {spec.describe()} is not [batch, kv_heads, length, head_size] "
                         "with fixed heads and head size")
    return dims[1], dims[3]


def _token_ids(specs: Sequence[InputSpec], new: Sequence[str], positions: Sequence[str], mask: str | None,
               what: str) -> str:
    """The 2-D integer input of the new tokens that is neither the mask nor a position input."""
    found = [s.name for s in specs if s.dtype.kind in "iu" and s.dims is not None and len(s.dims) == 2
             and s.name not in positions and s.name != mask and s.dims[1] in new]
    if len(found) != 1:
        named = [name for name in found if name == "input_ids"]
        if len(named) != 1:
            raise UsageError(f"{what} needs one token-ids input [batch, new tokens]; found "
                             f"{', '.join(found) or 'none'}")
        return named[0]
    return found[0]


def _logits(model: onnx.ModelProto, presents: set[str], what: str) -> tuple[str, int]:
    """The logits output (``logits``, else the one output of rank 3 besides the presents) and its vocabulary."""
    outputs = [o for o in model.graph.output if o.name not in presents]
    named = [o for o in outputs if o.name == "logits"]
    ranked = named or [o for o in outputs if len(o.type.tensor_type.shape.dim) == 3]
    if len(ranked) != 1:
        raise UsageError(f"{what} needs one logits output [batch, new tokens, vocabulary]; found "
                         f"{', '.join(o.name for o in outputs) or 'none'}")
    last = ranked[0].type.tensor_type.shape.dim[-1]
    if not last.HasField("dim_value"):
        raise UsageError(f"{what}: the vocabulary size of {ranked[0].name!r} is not fixed")
    return ranked[0].name, last.dim_value
