"""Checks of ``embed-layernorm``: word + position (+ segment) lookups, summed, LayerNorm -> EmbedLayerNormalization.

onnxruntime's EmbedLayerNormalization takes int32 [batch, sequence] ids, 2-D tables of one hidden size and 1-D
gamma/beta. Its ``position_ids`` input is optional: without it every row gets positions 0..sequence-1, which
is what BERT-family exporters compute (a Slice of a registered ``position_ids`` buffer up to the sequence
length, a Range, or a folded constant). :func:`positions_are_arange` proves that by running the position
computation (:mod:`gsrewrite_patterns._shared.producers`) at every length
:mod:`gsrewrite_patterns._shared.sizes` chooses (7, 33, 130, past every threshold its constants can make, and
the whole of a sliced position buffer); when it cannot, the fallback pattern passes the model's position ids
through.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gsrewrite.plugin_api import Match, constant_values, reads

from .._shared.producers import NotProven
from .._shared.sizes import values_by_length


@reads("beta", "gamma", "ids", "pos", "word", optional=("pids", "seg", "segw",))
def embedding_operands(match: Match) -> str | None:
    """2-D int ids, 2-D float tables of the hidden size (gamma's length), float 1-D gamma and beta."""
    gamma, beta = match.constant("gamma"), match.constant("beta")
    if gamma is None or beta is None or gamma.ndim != 1 or beta.shape != gamma.shape:
        return "gamma and beta are not 1-D constants of one length"
    hidden = gamma.shape[0]
    dtype = gamma.dtype
    for table in ("word", "pos", "segw"):
        if match.tensor(table) is None:
            continue  # no segment embedding (or a folded position lookup) in this pattern
        value = match.constant(table)
        if value is None or value.ndim != 2 or value.shape[1] != hidden or value.dtype != dtype:
            shape = list(value.shape) if value is not None else "not a constant"
            return f"embedding table '{table}' is {shape}, not [rows, {hidden}] of {dtype}"
    if dtype not in (np.float32, np.float16):
        return f"embeddings of {dtype}: EmbedLayerNormalization takes float or float16"
    for ids in ("ids", "seg", "pids"):
        if match.tensor(ids) is None:
            continue
        shape, kind = match.shape(ids), match.dtype(ids)
        if shape is None or len(shape) != 2:
            return f"'{ids}' has rank {len(shape) if shape is not None else 'unknown'}, not 2 ([batch, sequence])"
        if kind is None or kind.kind not in "iu":
            return f"'{ids}' has type {kind}, not integer ids"
    return _same_dims(match)


def _same_dims(match: Match) -> str | None:
    """Segment ids have the ids' shape, position ids [1 or batch, sequence], where both dims are known numbers
    (symbolic dims named differently by different exporters or by inference cannot be compared)."""
    ids = match.shape("ids")
    assert ids is not None
    for name in ("seg", "pids"):
        shape = match.shape(name) if match.tensor(name) is not None else None
        if shape is None:
            continue
        for axis, (mine, theirs) in enumerate(zip(shape, ids, strict=True)):
            if isinstance(mine, int) and isinstance(theirs, int) and mine != theirs \
                    and not (name == "pids" and axis == 0 and mine == 1):
                return f"'{name}' has shape {shape}, the ids {ids}"
    return None


@reads("ids", "pids")
def positions_are_arange(match: Match) -> str | None:
    """The position ids are 0..sequence-1 in every row (proven by running their computation)."""
    pids = match.tensor("pids")
    ids = match.tensor("ids")
    if pids is None or ids is None:
        return "no position ids"
    try:
        _prove_arange(match, pids, ids)
    except NotProven as exc:
        return str(exc)
    return None


def _prove_arange(match: Match, pids: object, ids: object) -> None:
    import onnx_graphsurgeon as gs

    assert isinstance(pids, gs.Tensor) and isinstance(ids, gs.Tensor)
    if isinstance(pids, gs.Constant):
        value = constant_values(pids)
        length = ids.shape[1] if ids.shape is not None else None
        if not isinstance(length, int) or value.ndim != 2 or value.shape[1] != length:
            raise NotProven("constant position ids, but the sequence length is not that fixed")
        _require_arange(value, length)
        return
    for length, value in values_by_length(match.graph, match.opset, pids, "the position ids",
                                          ids.shape or [None, None], 1, value_axis=-1):
        _require_arange(value, length)


def _require_arange(value: np.ndarray, length: int) -> None:
    if value.ndim != 2 or value.shape[1] != length or np.any(value != np.arange(length)[None, :]):
        raise NotProven(f"the position ids are not 0..{length - 1} in every row (shape {list(value.shape)})")


@reads("gamma", "ids", "pe")
def folded_positions(match: Match) -> str | None:
    """``pe`` is a folded position lookup: [1, S, H] or [S, H], S the ids' fixed sequence length."""
    pe, ids, gamma = match.constant("pe"), match.shape("ids"), match.constant("gamma")
    if pe is None or ids is None or gamma is None:
        return "no folded position embedding"
    length = ids[1]
    if not isinstance(length, int):
        return f"the sequence length is {length!r}, not fixed: a folded position constant cannot be reused"
    if pe.shape not in ((1, length, gamma.shape[0]), (length, gamma.shape[0])) or pe.dtype != gamma.dtype:
        return f"the added constant is {list(pe.shape)} of {pe.dtype}, not [1, {length}, {gamma.shape[0]}]"
    return None


@reads("pe")
def folded_position_table(match: Match) -> np.ndarray:
    """The folded position rows as EmbedLayerNormalization's [S, H] position table."""
    pe = match.constant("pe")
    assert pe is not None
    return np.ascontiguousarray(pe.reshape(pe.shape[-2], pe.shape[-1]))


CHECKS: dict[str, Callable[[Match], str | None]] = {
    "embedding_operands": embedding_operands,
    "positions_are_arange": positions_are_arange,
    "folded_positions": folded_positions,
}
COMPUTATIONS: dict[str, Callable[[Match], object]] = {"folded_position_table": folded_position_table}
