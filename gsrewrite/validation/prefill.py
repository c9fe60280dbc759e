"""A decoder's inputs as generation makes them: the past is what the original's own prefill of token ids produced,
the mask spans that past and the new tokens (which are always visible), positions follow the mask.

Validation used to fill ``past_key_values.*`` with normal(0, 1) noise: a state no prompt produces, where attention
is near uniform and a real model's logits say little (int4 SmolLM2 "scored" cosine -0.48 on such noise while it
keeps 70% of the greedy tokens of real continuations). Here, for a set with ``P`` cached tokens:

1. a prefill feed of ``P`` new tokens over no past is drawn as the set's own inputs are (token ids inside the
   embedding table, mask rows of every kind: padding left or right, holes, none);
2. the original runs it; each ``present`` output becomes the ``past`` input it feeds back into
   (:func:`cache_pairs`), non-finite values at masked positions zeroed (they are never read);
3. the step's mask is the prefill's rows followed by ones for the new tokens, and 2-D position inputs count the
   visible tokens before each position (``cumsum(mask) - 1``, masked positions 1, as transformers' generate does).

Both models then run the same step on that past.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import onnx

from gsrewrite.validation.dims import InputDims
from gsrewrite.validation.inputs import InputPlan, generate_inputs
from gsrewrite.validation.value_hints import is_position

log = logging.getLogger(__name__)

_PAST_PREFIXES = ("past_key_values", "past_key_value", "past")
_PRESENT_NAMES = ("present", "present_key_values", "present_key_value")


@dataclass(frozen=True)
class PrefillPlan:
    """How a decoder's inputs are tied to its prefill: ``pairs`` past input -> present output; ``mask``: the 2-D
    mask over past + new tokens (``None``: none); ``positions``: 2-D position inputs."""

    pairs: Mapping[str, str]
    past: Sequence[str]
    new: Sequence[str]
    mask: str | None
    positions: Sequence[str]


def cache_pairs(model: onnx.ModelProto, past_inputs: Sequence[str]) -> dict[str, str]:
    """Past input -> the present output of the same layer and kind: ``past_key_values.3.key`` -> ``present.3.key``
    (optimum, transformers, onnxruntime-genai), ``past.3`` -> ``present.3``, ``past_key_values.0.decoder.key`` ->
    ``present.0.decoder.key``; then by the numbers and words left once ``past``/``present`` are taken out. A
    past with no present (a cross-attention cache filled by an encoder) stays unpaired."""
    outputs = [o.name for o in model.graph.output]
    by_key: dict[tuple[str, ...], list[str]] = {}
    for name in outputs:
        if "present" in name.lower():
            by_key.setdefault(_key(name, "present"), []).append(name)
    pairs: dict[str, str] = {}
    for past in past_inputs:
        direct = [_renamed(past, present) for present in _PRESENT_NAMES]
        found = next((name for name in direct if name in outputs), None)
        if found is None:
            matches = by_key.get(_key(past, "past"), [])
            found = matches[0] if len(matches) == 1 else None
        if found is not None and found not in pairs.values():
            pairs[past] = found
    left = [name for name in past_inputs if name not in pairs]
    unpaired = [name for name in outputs if "present" in name.lower() and name not in pairs.values()]
    if left and len(left) == len(unpaired):  # ``past_key`` -> ``present``: one to one, in order
        pairs.update(zip(left, unpaired, strict=True))
    return pairs


def _renamed(past: str, present: str) -> str:
    for prefix in _PAST_PREFIXES:
        if past.startswith(prefix):
            return present + past[len(prefix):]
    return past


def _key(name: str, word: str) -> tuple[str, ...]:
    lowered = name.lower()
    for remove in ("_key_values", "_key_value", word, "cache"):
        lowered = lowered.replace(remove, " ")
    return tuple(t for t in re.split(r"[^a-z0-9]+", lowered) if t)


def prefill_plan(model: onnx.ModelProto, dims: InputDims) -> PrefillPlan | None:
    """How ``model``'s decode inputs follow from a prefill (with no pairs when its past feeds back from no output:
    then only the positions follow the mask); ``None`` for a model that is not a decoder, or has neither."""
    if not dims.is_decoder:
        return None
    past_symbols = [n for n, role in dims.roles.items() if role == "past" and n in dims.solution.free]
    floats = {s.name for s in dims.specs if s.dtype.kind == "f"}
    past_inputs = [name for name, shape in dims.dims.items()
                   if name in floats and any(set(_symbols(d)) & set(past_symbols) for d in shape)]
    pairs = cache_pairs(model, past_inputs)
    masks = [s.name for s in dims.specs if _is_mask_name(s.name) and len(dims.dims[s.name]) == 2]
    positions = [s.name for s in dims.specs if s.dtype.kind in "iu" and is_position(s.name)
                 and len(dims.dims[s.name]) == 2]
    mask = masks[0] if len(masks) == 1 else None
    if not pairs and mask is None:
        return None
    return PrefillPlan(pairs, past_symbols, sorted(dims.new_tokens), mask, positions)


def _symbols(dim: Any) -> list[str]:
    from gsrewrite.shapes import symdim

    return list(symdim.symbols(dim))


def _is_mask_name(name: str) -> bool:
    return "mask" in name.lower()


#: which mask values a contract keeps: ``new`` (``unpadded-queries``): 1 at every new token; ``all``
#: (``unpadded``): 1 everywhere, the prefill's past too; None: as drawn (padding left or right, holes)
Visible = Literal["new", "all"] | None


def prefilled_feed(plan: PrefillPlan, dims: InputDims, plans: Sequence[InputPlan], bindings: Mapping[str, int],
                   feed: dict[str, np.ndarray], seed: Sequence[int], mask_offset: int,
                   run_original: Callable[[dict[str, np.ndarray]], Mapping[str, Any]], visible: Visible = None
                   ) -> dict[str, np.ndarray]:
    """``feed`` (a step drawn at ``bindings``) with its past taken from the original's prefill of as many tokens
    (``run_original`` runs it), its mask continuing the prefill's and its positions following the mask. A step
    over no past only gets positions that follow its mask; ``visible`` (:data:`Visible`): the mask values the
    accepted contracts keep (a step over a past has 1 at its new tokens anyway)."""
    past = sum(bindings.get(n, 0) for n in plan.past)
    if past == 0 or not plan.pairs:
        return queries_visible(plan, feed, past, visible)
    prefill_bindings = {**bindings, **{n: 0 for n in plan.past}, **{n: past for n in plan.new}}
    shapes = dims.shapes(prefill_bindings)
    prefill_plans = [dataclasses.replace(p, shape=shapes[p.name], start=None if p.start is None else 0) for p in plans]
    prefill = queries_visible(plan, generate_inputs(prefill_plans, [*seed, 1], mask_offset), 0,
                              "all" if visible == "all" else None)
    presents = run_original(prefill)
    step = dict(feed)
    if plan.mask is not None and plan.mask in prefill:
        visible_new = np.ones((step[plan.mask].shape[0], step[plan.mask].shape[1] - past), step[plan.mask].dtype)
        step[plan.mask] = np.concatenate([prefill[plan.mask], visible_new], axis=1)
    for past_name, present_name in plan.pairs.items():
        value = np.asarray(presents[present_name])
        if value.shape != step[past_name].shape:
            raise ValueError(f"the prefill's {present_name!r} has the shape {list(value.shape)}, not that of "
                             f"{past_name!r} {list(step[past_name].shape)}")
        step[past_name] = np.where(np.isfinite(value), value, 0).astype(step[past_name].dtype)
    return _with_positions(plan, step, past)


def queries_visible(plan: PrefillPlan, feed: dict[str, np.ndarray], past: int, visible: Visible = "new"
                    ) -> dict[str, np.ndarray]:
    """``feed`` with its mask 1 at every new token (after ``past`` columns; ``visible`` ``all``: everywhere; None:
    as it is) and positions following it: the inputs the contracts keep."""
    step = dict(feed)
    if visible is not None and plan.mask is not None and plan.mask in step:
        step[plan.mask] = step[plan.mask].copy()
        step[plan.mask][:, 0 if visible == "all" else past:] = 1
    return _with_positions(plan, step, past)


def _with_positions(plan: PrefillPlan, feed: dict[str, np.ndarray], past: int) -> dict[str, np.ndarray]:
    """2-D position inputs counting the visible tokens before each new one (masked ones at 1), as generate does."""
    if plan.mask is None or plan.mask not in feed:
        return feed
    mask = feed[plan.mask].astype(np.int64)
    counted = np.cumsum(mask, axis=1) - 1
    counted = np.where(mask == 0, 1, np.maximum(counted, 0))
    for name in plan.positions:
        if name in feed and feed[name].ndim == 2 and feed[name].shape[0] == mask.shape[0] \
                and feed[name].shape[1] == mask.shape[1] - past:
            feed[name] = counted[:, past:].astype(feed[name].dtype)
    return feed


def prefill_described(plan: PrefillPlan, bindings: Mapping[str, int], described: Mapping[str, dict[str, Any]],
                      visible: Visible = None) -> dict[str, dict[str, Any]]:
    """The report's description of the inputs :func:`prefilled_feed` made (the others as they were)."""
    past = sum(bindings.get(n, 0) for n in plan.past)
    out: dict[str, dict[str, Any]] = {}
    if visible == "new" and not (past and plan.pairs) and plan.mask is not None and plan.mask in described:
        out[plan.mask] = {**described[plan.mask], "values": "1 at every new token (unpadded-queries)" +
                          (": the past's columns as drawn" if past else "")}
    if past and plan.pairs:
        out.update({name: {**described[name], "values": f"the original's {present} after its own prefill of {past}"
                           " tokens"} for name, present in plan.pairs.items() if name in described})
        if plan.mask is not None and plan.mask in described:
            out[plan.mask] = {**described[plan.mask], "values": "the prefill's mask rows (padding left or right, "
                              "holes, none), then 1 for every new token"}
    if visible == "all" and plan.mask is not None and plan.mask in described:
        out[plan.mask] = {**described[plan.mask], "values": "1 everywhere (unpadded)"}
    if plan.mask is not None:
        for name in plan.positions:
            if name in described:
                last = past + described[name]["shape"][-1] - 1
                out[name] = {**described[name], "values": f"positions up to {last}: the visible tokens before each "
                             "(cumsum of the mask - 1; 1 where masked)"}
    return out
