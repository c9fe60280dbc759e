"""Check and computation of ``gqa-past-window``: a sliding-window causal bias over a KV cache, proven for every
length, becomes GroupQueryAttention's ``local_window_size``.

Mistral's and Gemma2's local layers let query ``i`` (absolute position ``P + i`` after a past of ``P``) see key
``j`` iff ``P + i - W < j <= P + i`` and the 2-D attention mask keeps ``j``. onnxruntime's GroupQueryAttention
with ``causal = 1`` and ``local_window_size = L`` lets it see exactly the ``L`` keys ``P + i - L < j <= P + i``
(measured on its CPU kernel, 1.32: ``L = 2`` gives query 5 the keys 4 and 5), so ``L = W``. The exporter's bias
(padding, causal and window terms) stays the op's ``attention_bias``: the window is also the op's, which may
skip the keys outside it.

Exact while no query token is padded: a padded query's window row is all masked, and the original spreads it
over every key (one value added everywhere) where the op spreads it over its window, so the outputs at padded
positions differ (the real tokens' do not). The pattern therefore narrows the model to ``unpadded-queries`` as
well as ``batch1-chunks`` (mha.toml); without both, ``gqa-past`` keeps the window in the bias.

The proof runs the bias computation as :mod:`.attention_mask` does, at every length
:mod:`gsrewrite_patterns._shared.sizes` chooses from its constants, in three shapes of a step: a prefill (``S = L``,
no past), a decode step (``S = 1`` after ``L - 1``) and a chunk (``S = 3`` after ``L``), with masks holed in
different places; ``W`` is read at the longest and must hold everywhere. A bias that never cuts a window at the
lengths tried is plain causal (``gqa-past`` takes it); one the rule does not describe is refused with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from gsrewrite.plugin_api import CheckFailed, Match, reads

from .._shared.producers import NotProven, computation, evaluator, stand_in, submodel
from .._shared.sizes import Side, foreign_dims, plan_lengths

logger = logging.getLogger(__name__)

#: a masked position must be at least this negative (as attention_mask.MAX_FILTER_VALUE)
MAX_FILTER_VALUE = -1e4
#: (new tokens, past) of a step at proof length L: a prefill, a decode step, a chunk over a past
_STEPS: tuple[Callable[[int], tuple[int, int]], ...] = (lambda n: (n, 0), lambda n: (1, n - 1), lambda n: (3, n))
_MEMO = "_gsrewrite_window_bias"


@reads("mask", "past_k", "q4")
def sliding_window_bias(match: Match) -> str | None:
    """The bias is exactly a sliding-window causal rule of some width W over a cache, plus the 2-D mask's padding."""
    found = _analysis(match)
    return found if isinstance(found, str) else None


@reads("mask", "past_k", "q4")
def sliding_window_size(match: Match) -> int:
    """W, the keys a query sees (itself included): GroupQueryAttention's ``local_window_size``."""
    found = _analysis(match)
    if isinstance(found, str):
        raise CheckFailed(found)
    return found


def _analysis(match: Match) -> int | str:
    memo: dict[str, int | str] = match.__dict__.setdefault(_MEMO, {})
    if "window" not in memo:
        try:
            memo["window"] = _analyse(match)
        except NotProven as exc:
            memo["window"] = str(exc)
    return memo["window"]


def _analyse(match: Match) -> int:
    bias, q, past = match.tensor("mask"), match.shape("q4"), match.shape("past_k")
    if bias is None:
        raise NotProven("no additive bias")
    if q is None or past is None or len(q) != 4 or len(past) != 4:
        raise NotProven(f"Q {q} / past {past}: not [batch, heads, length, head_size]")
    found = computation(match.graph, bias, "the bias")
    if len(found.value_inputs) != 1:
        raise NotProven(f"the bias depends on {len(found.value_inputs)} graph inputs' values, not on one mask")
    mask = found.value_inputs[0]
    if mask.shape is None or len(mask.shape) != 2 or mask.dtype is None or np.dtype(mask.dtype).kind not in "biu":
        raise NotProven(f"the bias comes from '{mask.name}', not a 2-D integer/bool mask")
    batch, total = mask.shape
    new, old = q[2], past[2]
    if not all(isinstance(d, str) for d in (new, old, total)):
        raise NotProven(f"the lengths {new}, {old}, {total} are not all symbolic: proven at one size only")
    names = [d for d in (batch, new, old, total) if isinstance(d, str)]
    sums = [d for t in found.shape_inputs for d in t.shape or () if isinstance(d, str) and "+" in d
            and all(p.strip() in names for p in d.split("+"))]
    foreign = foreign_dims(found.shape_inputs, [*names, *sums])
    if foreign:
        raise NotProven(f"the bias {foreign}")
    inputs = [mask, *found.shape_inputs]
    evaluate = evaluator(submodel(match.opset, found.nodes, inputs, bias), "the bias computation")

    def feeds(rows: int, steps: int, cached: int, case: int) -> dict[str, np.ndarray]:
        named = {str(d): n for d, n in ((batch, rows), (new, steps), (old, cached), (total, steps + cached))
                 if isinstance(d, str)}
        out = {mask.name: _holed(rows, steps + cached, case).astype(np.dtype(mask.dtype))}
        for tensor in found.shape_inputs:  # a dim named as a sum of the lengths ('sequence + past_sequence')
            sums = {d: sum(named[p.strip()] for p in d.split("+")) for d in tensor.shape or ()
                    if isinstance(d, str) and "+" in d and all(p.strip() in named for p in d.split("+"))}
            out[tensor.name] = stand_in(tensor, {**named, **sums}, (rows, steps))
        return out

    def fits(length: int) -> bool:
        try:
            value = evaluate(feeds(1, length, 0, 0))
        except NotProven:
            return False
        return value.ndim == 4 and value.shape[-1] == length

    side = Side(found.nodes, inputs, bias, match.opset, "the bias")
    plan = plan_lengths(side, batch if isinstance(batch, int) else None,
                        lambda rows, length: feeds(rows, length, 0, 0), fits)
    longest = max(length for length, _ in plan)
    window = _window(evaluate(feeds(1, 1, longest - 1, 0)), longest)
    filter_value: float | None = None
    for length, rows in plan:
        for step in _STEPS:
            steps, cached = step(length)
            for case in range(3):
                inputs_at = feeds(rows, steps, cached, case)
                try:
                    value = evaluate(inputs_at)
                except NotProven as exc:
                    raise NotProven(f"the bias cannot be computed at {steps} new tokens after {cached}: {exc}") \
                        from None
                filter_value = _check(value, inputs_at[mask.name], cached, window, filter_value,
                                      f"batch {rows}, {steps} new tokens after {cached}")
    logger.debug("sliding window of %d keys proven at lengths %s", window, [n for n, _ in plan])
    return window


def _holed(rows: int, length: int, case: int) -> np.ndarray:
    """A [rows, length] mask of 1s with holes in different places per row and case (row 0: none, then all but
    the first position; case 2 keeps the holes)."""
    holes = (np.arange(length)[None, :] + np.arange(rows)[:, None] + case) % 3 == 2
    if case < 2:
        holes[0, :] = case == 1
        holes[0, 0] = False
    return ~holes


def _window(value: np.ndarray, length: int) -> int:
    """W read off a decode step at ``length`` keys with nothing padded (row 0): the keys its query sees."""
    if value.ndim != 4 or value.shape[-1] != length:
        raise NotProven(f"the bias has shape {list(value.shape)}, not [batch, ., new tokens, {length}]")
    seen = int(np.count_nonzero(value[0, 0, -1] == 0))
    if seen >= length:
        raise NotProven(f"the bias cuts no window at {length} keys: plain causal, not a sliding window")
    if seen < 1:
        raise NotProven("the bias masks every key of a decode step")
    return seen


def _check(value: np.ndarray, mask: np.ndarray, cached: int, window: int, filter_value: float | None,
           where: str) -> float:
    """The masked value, when ``value`` is exactly the window rule on ``mask`` after ``cached`` past keys."""
    rows, total = mask.shape
    steps = total - cached
    if value.ndim != 4 or value.shape[-1] != total or value.shape[-2] != steps or value.shape[0] not in (1, rows):
        raise NotProven(f"the bias has shape {list(value.shape)}, not [batch, ., {steps}, {total}] ({where})")
    full = np.broadcast_to(value, (rows, *value.shape[1:]))
    query = cached + np.arange(steps)[:, None]
    keys = np.arange(total)[None, :]
    keep = mask.astype(bool)[:, None, None, :] & ((keys <= query) & (keys > query - window))[None, None]
    keep = np.broadcast_to(keep, full.shape)
    if np.any(full[keep] != 0):
        raise NotProven(f"the bias is not 0 inside a window of {window} keys where the mask is 1 ({where})")
    masked = full[~keep]
    if masked.size == 0:
        return filter_value if filter_value is not None else MAX_FILTER_VALUE
    found = float(masked.flat[0])
    if np.any(masked != masked.flat[0]) or not found <= MAX_FILTER_VALUE or not np.isfinite(found):
        raise NotProven(f"the bias is not one very negative finite value outside a window of {window} ({where})")
    if filter_value is not None and found != filter_value:
        raise NotProven("the bias gives masked positions different values for different masks")
    return found


CHECKS = {"sliding_window_bias": sliding_window_bias}
COMPUTATIONS = {"sliding_window_size": sliding_window_size}
