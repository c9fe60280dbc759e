"""Input contracts a user may narrow for a faster fused op: what the rewritten model then no longer accepts.

A rewrite never narrows what the original accepts unless the user asked for that contract by name
(``--contract NAME``, ``contracts=`` in the library, implied by ``--target genai``); a pattern whose replacement
narrows one says so (``narrows`` in its file) and is skipped otherwise, with the reason. When such a rewrite is
kept, the contract is stated in the result (``contracts``, ``--json``), the report and the model's
``metadata_props`` (:data:`METADATA_KEY`), and validation tries only the inputs the contract keeps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from gsrewrite.errors import UsageError

if TYPE_CHECKING:
    import onnx

#: contract name -> what the rewritten model no longer accepts
CONTRACTS = {
    "batch1-chunks": "several new tokens over a non-empty past only at batch 1 (onnxruntime's CPU "
                     "GroupQueryAttention refuses them at batch > 1: chunked prefill and speculative decoding of "
                     "several sequences at once); a decode step of one token runs at any batch",
    "unpadded-prompts": "a prompt over an empty past at batch > 1 only when every row has the same position ids, "
                        "no padding (onnxruntime's GroupQueryAttention rotates a step over an empty past by the "
                        "first row's positions: a padded batched prompt); decode steps and chunks keep any "
                        "position ids, and so do prompts at batch 1 unless the rotary tables are constants "
                        "(shared-kv-buffer with a known length): then a prompt's positions run on from its first",
    "unpadded-queries": "every new token of a step visible: the attention mask is 1 at each new token's position "
                        "(a prompt, chunk or decode step with padding or holes among its new tokens is no longer "
                        "accepted, at any batch: a sliding window fused as GroupQueryAttention's local_window_size "
                        "spreads a padded query whose window has no visible key over that window where the original "
                        "spreads it over all keys, so the outputs at such positions differ); padding in the past "
                        "stays accepted",
    "unpadded": "no padding anywhere: the attention mask is 1 at every position of the past and the new tokens and "
                "position ids run on from the past length (what onnxruntime-genai's generate loop feeds at batch 1): "
                "GroupQueryAttention then takes no bias from the mask, only its lengths, and counts positions itself "
                "(a padded batch, a mask with holes or position ids of packed sequences are no longer accepted); "
                "implies unpadded-prompts and unpadded-queries",
    "shared-kv-buffer": "the past as one buffer of the longest length that the present shares (onnxruntime-genai's "
                        "past_present_share_buffer): the attention mask's length says how much of it is valid (mask "
                        "length - new tokens), the present comes back at the buffer's length, not past + new",
    "int8-kv-cache": "the past and present as int8 with per-channel scales stored in the model (GroupQueryAttention's "
                     "quantized cache): a float cache is no longer accepted, and the outputs move within an "
                     "int8 tolerance (cosine, top-1) instead of float rounding",
}
#: contract -> the narrower contracts it includes (accepting it accepts them)
IMPLIES = {"unpadded": ("unpadded-prompts", "unpadded-queries")}
#: the contracts ``--target genai`` implies: what onnxruntime-genai's generate loop lives with
GENAI_CONTRACTS = ("batch1-chunks", "shared-kv-buffer")
#: ``shared-kv-buffer``: the name of the past and present dims once they are one buffer of the longest length
BUFFER_DIM = "max_length"
#: the ``metadata_props`` key that states the contracts a model was rewritten under
METADATA_KEY = "gsrewrite.contracts"


def check_contracts(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` deduplicated in order, each followed by those it implies (:data:`IMPLIES`); :class:`UsageError`
    naming the known ones for an unknown name."""
    out: list[str] = []
    for name in names:
        if name not in CONTRACTS:
            raise UsageError(f"unknown contract {name!r}; choose among: {', '.join(CONTRACTS)}")
        for one in (name, *IMPLIES.get(name, ())):
            if one not in out:
                out.append(one)
    return tuple(out)


def describe(names: Iterable[str]) -> str:
    """``batch1-chunks: several new tokens ...``, one entry per contract, ``; `` between them."""
    return "; ".join(f"{name}: {CONTRACTS[name]}" for name in names)


def state(model: onnx.ModelProto, names: Sequence[str]) -> None:
    """Write ``names`` (:func:`describe`) into ``model``'s ``metadata_props`` (:data:`METADATA_KEY`), replacing
    what was there; none: the entry is removed."""
    props = [prop for prop in model.metadata_props if prop.key != METADATA_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(props)
    if names:
        model.metadata_props.add(key=METADATA_KEY, value=describe(names))


def stated(model: onnx.ModelProto) -> tuple[str, ...]:
    """The contracts ``model``'s ``metadata_props`` state (:func:`state`), in order; () when none (or only names
    this version does not know: a model from a newer gsrewrite is then validated as any other)."""
    text = next((prop.value for prop in model.metadata_props if prop.key == METADATA_KEY), "")
    names = [part.split(":", 1)[0].strip() for part in text.split("; ") if ":" in part]
    return check_contracts(name for name in names if name in CONTRACTS)


#: contracts that change what the model takes or returns (not only which inputs it accepts): comparing such a model
#: with its original needs the translation optimize sets up (validation.candidate_inputs)
LAYOUT_CONTRACTS = ("shared-kv-buffer", "int8-kv-cache")
