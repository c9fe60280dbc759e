"""Checks and computations of ``gqa``: attention whose K/V heads are repeated for groups of Q heads.

transformers' ``repeat_kv`` turns K and V of [B, Hkv, L, dh] into [B, H, L, dh] with Unsqueeze (a size-1 axis
after the heads), Expand (to [B, Hkv, rep, L, dh]) and Reshape (merging Hkv and rep): Q head h then reads KV
head h // rep, which is what GroupQueryAttention (and ONNX Attention-23 with fewer KV heads) computes from
the un-repeated K and V. The shape targets of Expand and Reshape are computed at run time in dynamic exports,
so :func:`repeated_kv` proves the repetition from the inferred shapes of every step instead of their values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gsrewrite.plugin_api import CheckFailed, Match, dim_add, dim_of, reads

from .attention import query_heads

Dim = int | str | None


#: onnxruntime's GroupQueryAttention refuses other head sizes at run time ("head_size must be a multiple of 8")
GQA_HEAD_SIZE_MULTIPLE = 8

#: labels of the repeat_kv nodes (Unsqueeze, Expand, Reshape) of K (inside the RepeatedKeyT fragment) and V
_STEPS = {"K": ("k/unsqueeze", "k/expand", "k/repeat"), "V": ("v_unsqueeze", "v_expand", "v_repeat")}


def _repetitions(match: Match) -> tuple[Any, Any, list[Any]] | str:
    """Q's shape, its (heads, head size), and how K and V are repeated (per :data:`_STEPS`), or why not."""
    q = match.shape("q4")
    heads = query_heads(match)
    if q is None or len(q) != 4 or heads is None:
        return f"Q has shape {q}: not [batch, heads, sequence, head_size] with a known head count"
    groups = []
    for name in _STEPS:
        found = _repetition(match, name, heads[0])
        if isinstance(found, str):
            return found
        groups.append(found)
    return q, heads, groups


@reads("k/expand", "k/repeat", "k/unsqueeze", "mask", "q4", "v_expand", "v_repeat", "v_unsqueeze")
def repeated_kv(match: Match) -> str | None:
    """K and V are repeated per KV head (not tiled), the same number of times, for Q of known heads."""
    found = _repetitions(match)
    if isinstance(found, str):
        return found
    q, heads, ((k_heads, k_rep, k_len, k_size), (v_heads, v_rep, v_len, v_size)) = found
    if (k_heads, k_rep) != (v_heads, v_rep):
        return f"K is repeated {k_heads}x{k_rep}, V {v_heads}x{v_rep}"
    # two declared symbols may differ at run time (a KV cache, cross-attention): GroupQueryAttention needs Q and
    # K of one length (it reads K's as the total one)
    if not _may_equal(q[2], k_len) or not _may_equal(k_len, v_len):
        return f"Q {q} and K/V of length {k_len}/{v_len}: not provably self-attention over one sequence"
    if k_heads * k_rep != heads[0] or heads[1] != k_size or not _may_equal(k_size, v_size):
        return f"{heads[0]} Q heads of size {heads[1]} do not match {k_heads}x{k_rep} KV heads of size {k_size}"
    if heads[1] % GQA_HEAD_SIZE_MULTIPLE:
        return f"head size {heads[1]}: onnxruntime's GroupQueryAttention needs a multiple of {GQA_HEAD_SIZE_MULTIPLE}"
    return _bias_shape(match, q)


@reads("k/expand", "k/repeat", "k/unsqueeze", "kk", "mask", "past_k", "past_v", "q4", "v_expand", "v_repeat",
       "v_unsqueeze", "vv")
def repeated_kv_cache(match: Match) -> str | None:
    """As :func:`repeated_kv`, over a cache: the repeated K/V are the past [B, Hkv, P, dh] with the new heads
    appended; the new heads cover Q's tokens (self-attention over the new tokens and the past)."""
    found = _repetitions(match)
    if isinstance(found, str):
        return found
    q, heads, ((k_heads, k_rep, _, k_size), (v_heads, v_rep, _, v_size)) = found
    if (k_heads, k_rep) != (v_heads, v_rep):
        return f"K is repeated {k_heads}x{k_rep}, V {v_heads}x{v_rep}"
    if k_heads * k_rep != heads[0] or heads[1] != k_size or not _may_equal(k_size, v_size):
        return f"{heads[0]} Q heads of size {heads[1]} do not match {k_heads}x{k_rep} KV heads of size {k_size}"
    for past, new in (("past_k", "kk"), ("past_v", "vv")):
        cache, added = match.shape(past), match.shape(new)
        if cache is None or added is None or len(cache) != 4 or len(added) != 4:
            return f"{past} {cache} / {new} {added}: not [batch, kv_heads, length, head_size]"
        if cache[1] != k_heads or added[1] != k_heads or cache[3] != k_size or added[3] != k_size:
            return f"{past} {cache} and {new} {added} do not hold {k_heads} KV heads of size {k_size}"
        if not _may_equal(added[2], q[2]):
            return f"the new {new} {added} does not cover Q's tokens {q}: not self-attention over a cache"
    if heads[1] % GQA_HEAD_SIZE_MULTIPLE:
        return f"head size {heads[1]}: onnxruntime's GroupQueryAttention needs a multiple of {GQA_HEAD_SIZE_MULTIPLE}"
    if match.tensor("mask") is not None:
        bias = match.shape("mask")
        if bias is None or len(bias) != 4 or not _may_equal(bias[2], q[2]):
            return f"the mask has shape {bias}, not [batch or 1, heads or 1, {q[2]}, total]"
    return None


@reads("kk", "mask", "past_k")
def mask_holds_lengths(match: Match) -> str | None:
    """The bias [batch, 1 or heads, sequence, total] has the cache's batch and past + new tokens as its last dim,
    so GroupQueryAttention's lengths can be read off it (the same tensor in every layer)."""
    bias, cache, added = match.shape("mask"), match.shape("past_k"), match.shape("kk")
    if match.tensor("mask") is None or bias is None or len(bias) != 4:
        return f"no bias of [batch, heads, sequence, total] to read the lengths off (mask {bias})"
    if cache is None or added is None or len(cache) != 4 or len(added) != 4:
        return f"past_k {cache} / kk {added}: not [batch, kv_heads, length, head_size]"
    batch, total, past, new = (dim_of(d) for d in (bias[0], bias[3], cache[2], added[2]))
    if batch is None or batch != dim_of(cache[0]) or total is None or past is None or new is None \
            or total != dim_add(past, new):
        return f"the bias {bias} does not hold the batch and past + new length of past_k {cache} and kk {added}"
    return None


@reads("k/expand", "k/repeat", "k/unsqueeze", "q4")
def repeated_kv_heads(match: Match) -> int:
    """The number of KV heads before the repetition (GroupQueryAttention's ``kv_num_heads``)."""
    heads = query_heads(match)
    found = _repetition(match, "K", heads[0] if heads else None)
    if isinstance(found, str):
        raise CheckFailed(found)
    return found[0]


def _repetition(match: Match, name: str, q_heads: int | None) -> tuple[int, int, Dim, Dim] | str:
    """(KV heads, repeats, length, head size) of the repeat_kv of K or V, from the inferred shapes: a size-1
    axis after the heads, broadcast (only it), then the leading axes merged back (4-D, or SDPA's 3-D)."""
    nodes = [match.node(label) for label in _STEPS[name]]
    if any(n is None for n in nodes):
        return f"{name} is not repeated"
    unsqueeze, expand, reshape = nodes
    before, unsqueezed = unsqueeze.inputs[0].shape, unsqueeze.outputs[0].shape
    expanded, repeated = expand.outputs[0].shape, reshape.outputs[0].shape
    if before is None or unsqueezed is None or expanded is None or repeated is None:
        return f"{name}'s repetition has unknown shapes"
    if len(before) != 4 or len(unsqueezed) != 5 or len(expanded) != 5 or len(repeated) not in (3, 4):
        return f"{name} goes {before} -> {unsqueezed} -> {expanded} -> {repeated}: not a repeat of heads"
    batch, heads, length, size = before
    if unsqueezed[2] != 1 or any(_differ(a, b) for a, b in zip(unsqueezed[:2] + unsqueezed[3:], before, strict=True)):
        return f"{name} is unsqueezed to {unsqueezed}, not after its heads axis"
    if any(_differ(a, b) for a, b in zip(expanded[:2] + expanded[3:], before, strict=True)):
        return f"{name} is expanded to {expanded}: more than the repeat axis changes"
    if not _same(repeated[-1], size) or not _same(repeated[-2], length) \
            or (len(repeated) == 4 and not _same(repeated[0], batch)):
        return f"{name} is reshaped to {repeated}: not its leading axes merged"
    reps = expanded[2]
    if not isinstance(reps, int) and isinstance(heads, int) and q_heads and heads > 0 and q_heads % heads == 0:
        reps = q_heads // heads
    if not isinstance(heads, int) or not isinstance(reps, int) or heads <= 0 or reps <= 0:
        return f"{name}'s head count {heads} or repeat count {reps} is not known"
    return heads, reps, length, size


def _bias_shape(match: Match, q: list[Dim]) -> str | None:
    """GroupQueryAttention takes a bias of [B or 1, H or 1, S, L]: no broadcast over the query rows."""
    if match.tensor("mask") is None:
        return None
    bias = match.shape("mask")
    if bias is None or len(bias) != 4 or not _may_equal(bias[2], q[2]) or not _may_equal(bias[3], q[2]):
        return f"the mask has shape {bias}, not [batch or 1, heads or 1, {q[2]}, {q[2]}]"
    return None


def _same(a: Any, b: Any) -> bool:
    """Equal known dims (the same number or the same symbol)."""
    return a is not None and a == b


def _differ(a: Any, b: Any) -> bool:
    """Dims that are certainly different (two different numbers); symbols and unknowns may be equal. Only for
    shapes an op already ties together (an Unsqueeze's or Expand's input and output): never for two inputs."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def _may_equal(a: Any, b: Any) -> bool:
    """Dims that can be equal for all we know: the same number or symbol, or one unknown (None, or a dim shape
    inference could not name, ``unk__N``). Two different declared symbols are taken as different lengths (the
    exporter named them apart); two different numbers, or a number and a declared symbol, are different."""
    if a == b:
        return True
    return any(d is None or (isinstance(d, str) and d.startswith("unk__")) for d in (a, b))


CHECKS: dict[str, Callable[[Match], str | None]] = {"repeated_kv": repeated_kv, "repeated_kv_cache": repeated_kv_cache,
                                                     "mask_holds_lengths": mask_holds_lengths}
COMPUTATIONS: dict[str, Callable[[Match], Any]] = {"repeated_kv_heads": repeated_kv_heads}
