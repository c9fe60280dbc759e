"""Check and computations of ``attention-mask-index``: an additive padding bias back to the raw 2-D mask.

Exporters turn the ``attention_mask`` input ([batch, sequence] of 1/0) into an additive score bias ([batch, 1,
1 or sequence, sequence] of 0 / a very negative value) with a dozen small nodes whose spelling changes with every
exporter and library version (Unsqueeze/Cast/Sub/Mul, or Expand/Where, or a Range/GreaterOrEqual/And grid).
onnxruntime's Attention takes the raw mask itself (``mask_index`` [batch, sequence], int32) and uses a faster
kernel for it. Rather than one template per spelling, the check proves what the bias computes: the nodes that
produce it may read only constants, that one 2-D integer/bool graph input, and the *shapes* of other inputs;
the check then runs those nodes in onnxruntime on masks with holes in different places and requires the
padding rule exactly: 0 where the mask is 1, one fixed very negative value where it is 0, the same for every
query row and head.

Causal decoders (GPT-2) combine the padding bias with the causal one (key j masked for query i < j). The
``causal_*`` check proves exactly that combination (for an [.., S, S] bias); the replacement is then a
unidirectional Attention with the raw mask as ``mask_index``. It must mask with float32's lowest value, which
onnxruntime gives the future keys (see :data:`CAUSAL_FILTER`).

**Every length, not one.** A sliding window (``i - j < 20``), a band (``|i - j| < 20``) or a prefix-LM mask
equals the causal or the padding rule at a short length and differs beyond it. The proof therefore runs at
every length :mod:`gsrewrite_patterns._shared.sizes` chooses from the computation's own constants (7, 33, 130, past
every threshold those constants can make, computed ones too: a window of ``Exp(ln 200 + 0 * S)`` is 200, and
the length of every constant table it slices), with batch 2 (1 for long lengths), and refuses when those
lengths get too large. None past the end of a table the model cannot run beyond; lengths at which the
computation fails or its result has another length are left out (a sliced causal buffer ends there);
an input read for its shape whose dims are named otherwise than the mask's is refused (a size no test sweeps).
Static mask dims are proven at their size only (the model runs at no other).

One proof per match: the check and the computations of a match share it (kept on the match; nothing is kept
across calls).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import CheckFailed, Match, reads

from .._shared.producers import NotProven, computation, evaluator, stand_in, submodel
from .._shared.sizes import Side, foreign_dims, plan_lengths, runs_at

logger = logging.getLogger(__name__)

#: A masked position must be at least this negative (onnxruntime's own default is -10000).
MAX_FILTER_VALUE = -1e4
#: What onnxruntime gets for a padding bias of float32's lowest value. Both give a fully masked row the same
#: uniform weights: a score below 4e12 vanishes into either when added (ulp(1e20) = 8.8e12), and any other
#: masked key gets exactly 0 from either. onnxruntime's CPU attention is faster with it (-1e12 alike, float32
#: min not: benchmarks/results/code_figures.md). (-inf is refused: a fully masked row is NaN in the original.)
ORT_LOWEST_FILTER = -1e20
#: onnxruntime's unidirectional Attention gives future keys float32's lowest value, whatever mask_filter_value
#: says. A query whose visible keys are all padded (left padding) then attends uniformly to the keys that have
#: the larger of the two values. The original attends uniformly to all keys when the bias gives padded and
#: future keys the same value: so a causal bias must mask with exactly float32's lowest, and keeps it.
CAUSAL_FILTER = float(np.finfo(np.float32).min)


@dataclass(frozen=True)
class PaddingBias:
    """What a proven bias computes: the raw mask input and the value masked positions get."""

    mask: gs.Variable
    filter_value: float


#: attribute of a Match holding its analyses {causal: PaddingBias or reason}: its check and computations share one
_MEMO = "_gsrewrite_mask_bias"


@reads("bias")
def padding_mask_bias(match: Match) -> str | None:
    """The bound ``bias`` is an additive padding bias computed from one 2-D mask input (proven by running it)."""
    result = _analysis(match, causal=False)
    return result if isinstance(result, str) else None


@reads("bias")
def padding_mask_input(match: Match) -> gs.Variable:
    """The raw [batch, sequence] mask input the bias was computed from."""
    return _proven(match, causal=False).mask


@reads("bias")
def padding_mask_filter(match: Match) -> float:
    """The value the bias gives masked positions, as onnxruntime's ``mask_filter_value``."""
    return _for_onnxruntime(_proven(match, causal=False).filter_value)


@reads("bias")
def causal_mask_bias(match: Match) -> str | None:
    """The bound ``bias`` masks exactly the padded keys (of one 2-D mask input) and the future ones."""
    result = _analysis(match, causal=True)
    return result if isinstance(result, str) else None


@reads("bias")
def causal_mask_input(match: Match) -> gs.Variable:
    """The raw [batch, sequence] mask input of a proven causal + padding bias."""
    return _proven(match, causal=True).mask


@reads("bias")
def causal_mask_filter(match: Match) -> float:
    """The value a proven causal + padding bias gives masked positions (float32's lowest, see
    :data:`CAUSAL_FILTER`), as onnxruntime's ``mask_filter_value``."""
    return _proven(match, causal=True).filter_value


def _for_onnxruntime(filter_value: float) -> float:
    """The exporter's masked value, or ORT_LOWEST_FILTER for one at least as negative (same results, faster)."""
    return max(filter_value, ORT_LOWEST_FILTER)


def _proven(match: Match, causal: bool) -> PaddingBias:
    result = _analysis(match, causal)
    if isinstance(result, str):
        raise CheckFailed(result)
    return result


def _analysis(match: Match, causal: bool) -> PaddingBias | str:
    """The proof for this match, run once per match (its check and computations ask in turn)."""
    bias = match.tensor("bias")
    if bias is None:
        return "no additive bias"
    memo: dict[bool, PaddingBias | str] = match.__dict__.setdefault(_MEMO, {})
    if causal not in memo:
        try:
            memo[causal] = _analyse(match, bias, causal)
        except NotProven as exc:
            memo[causal] = str(exc)
    return memo[causal]


def _analyse(match: Match, bias: gs.Tensor, causal: bool) -> PaddingBias:
    found = computation(match.graph, bias, "the bias")
    value_inputs, shape_inputs = found.value_inputs, found.shape_inputs
    if len(value_inputs) != 1:
        raise NotProven(f"the bias depends on {len(value_inputs)} graph inputs' values, not on one mask")
    mask = value_inputs[0]
    if mask.shape is None or len(mask.shape) != 2:
        raise NotProven(f"the bias comes from '{mask.name}', which is not a 2-D mask")
    if mask.dtype is None or np.dtype(mask.dtype).kind not in "biu":
        raise NotProven(f"the bias comes from '{mask.name}' of type {mask.dtype}, not an integer/bool mask")
    foreign = foreign_dims(shape_inputs, [d for d in mask.shape if isinstance(d, str)])
    if foreign:
        raise NotProven(f"the bias {foreign}")
    evaluate = evaluator(submodel(match.opset, found.nodes, [mask, *shape_inputs], bias), "the bias computation")
    filter_value: float | None = None
    plan = _test_dims(Side(found.nodes, [mask, *shape_inputs], bias, match.opset, "the bias"), evaluate)
    unfit: str | None = ""
    for dims in plan:
        for case in range(3):
            feeds = _feeds(mask, shape_inputs, dims, case)
            try:
                value = evaluate(feeds)
                unfit = runs_at(value, dims[1], (-1, -2)) if value.ndim else None
            except NotProven as exc:  # the model cannot run at this length either (a sliced table ends)
                unfit = str(exc)
            if unfit:
                logger.debug("the bias cannot be computed or added at sequence %d: %s", dims[1], unfit)
                break
            try:
                filter_value = _check_padding(value, feeds[mask.name], filter_value, causal)
            except NotProven as exc:
                raise NotProven(f"{exc} (batch {dims[0]}, sequence {dims[1]})") from None
    if filter_value is None:
        raise NotProven(f"the bias fits no tested sequence length ({[d[1] for d in plan]}): {unfit}")
    if causal and filter_value != CAUSAL_FILTER:
        raise NotProven(f"the bias masks with {filter_value:g}: a query whose visible keys are all padded would "
                        "differ (onnxruntime masks future keys with float32's lowest, the bias does not)")
    return PaddingBias(mask, filter_value)


def _test_dims(side: Side, evaluate: Callable[[dict[str, np.ndarray]], np.ndarray]) -> list[tuple[int, int]]:
    """Concrete (batch, sequence) pairs to prove the bias at: static dims as declared; a symbolic sequence at
    every length of :func:`~gsrewrite_patterns._shared.sizes.plan_lengths` (its constants, computed ones too,
    cannot hide a threshold; none past the end of a table the model slices); a symbolic batch at 2 (1 for long
    sequences)."""
    mask, *shape_inputs = side.inputs
    batch, sequence = mask.shape
    fixed_batch = batch if isinstance(batch, int) and batch > 0 else None
    if isinstance(sequence, int) and sequence > 0:
        return [(fixed_batch or 2, sequence)]

    def feeds(rows: int, length: int) -> dict[str, np.ndarray]:
        return _feeds(mask, shape_inputs, (rows, length), 0)

    def fits(length: int) -> bool:
        try:
            value = evaluate(feeds(fixed_batch or 1, length))
        except NotProven:
            return False
        return not value.ndim or runs_at(value, length, (-1, -2)) is None

    plan = plan_lengths(side, fixed_batch, feeds, fits)
    return [(fixed_batch or rows, length) for length, rows in plan]


def _feeds(mask: gs.Variable, shape_inputs: list[gs.Variable], dims: tuple[int, int],
           case: int) -> dict[str, np.ndarray]:
    """Inputs for one test: a mask with holes in different places per row, zeros for shape-only inputs."""
    batch, sequence = dims
    rows = np.arange(batch)[:, None]
    cols = np.arange(sequence)[None, :]
    holes = (cols + rows + case) % 3 == 2
    if case < 2:  # row 0: no padding at all, then everything padded but the first position (a fully masked
        holes[0, :] = case == 1  # row has no defined attention); case 2 keeps the holes (batch 1 sees them)
        holes[0, 0] = False
    mask_value = (~holes).astype(np.dtype(mask.dtype))
    feeds = {mask.name: mask_value}
    named = {d: size for d, size in zip(mask.shape, (batch, sequence), strict=True) if isinstance(d, str)}
    for tensor in shape_inputs:  # an unnamed or differently named dim: assume it follows the mask's axis
        feeds[tensor.name] = stand_in(tensor, named, dims)
    return feeds


def _check_padding(value: np.ndarray, mask: np.ndarray, filter_value: float | None, causal: bool = False) -> float:
    """The masked value, when ``value`` is exactly the padding bias of ``mask`` (with ``causal``: combined with
    the causal bias, key j masked for query i < j) (else NotProven)."""
    if value.dtype.kind != "f" or value.ndim > 4 or value.ndim < 1:
        raise NotProven(f"the bias has dtype {value.dtype} and rank {value.ndim}, not a float score bias")
    batch, sequence = mask.shape
    full: np.ndarray = value.reshape((1,) * (4 - value.ndim) + value.shape)
    if full.shape[-1] != sequence or full.shape[0] not in (1, batch):
        raise NotProven(f"the bias has shape {list(value.shape)}, not [batch, ., ., {sequence}]")
    full = np.broadcast_to(full, (batch, *full.shape[1:]))
    keep = mask.astype(bool)[:, None, None, :]
    if causal:
        if full.shape[-2] != sequence:
            raise NotProven(f"the bias has shape {list(value.shape)}, not [batch, ., {sequence}, {sequence}]")
        keep = keep & np.tril(np.ones((sequence, sequence), dtype=bool))[None, None]
    keep = np.broadcast_to(keep, full.shape)
    if np.any(full[keep] != 0):
        rule = "the mask is 1 and the key is not in the future" if causal else "the mask is 1"
        raise NotProven(f"the bias is not 0 where {rule}")
    masked = full[~keep]
    if masked.size == 0:
        return filter_value if filter_value is not None else MAX_FILTER_VALUE
    if np.any(masked != masked.flat[0]) or not float(masked.flat[0]) <= MAX_FILTER_VALUE:
        raise NotProven("the bias is not one very negative value where the mask is 0")
    found = float(masked.flat[0])
    if not np.isfinite(found):  # a row with every key masked: NaN in the original, uniform weights in the op
        raise NotProven(f"the bias masks with {found}: a fully masked row would be NaN, not as onnxruntime's")
    if filter_value is not None and found != filter_value:
        raise NotProven("the bias gives masked positions different values for different masks")
    return found


CHECKS = {"padding_mask_bias": padding_mask_bias, "causal_mask_bias": causal_mask_bias}
COMPUTATIONS = {"padding_mask_input": padding_mask_input, "padding_mask_filter": padding_mask_filter,
                "causal_mask_input": causal_mask_input, "causal_mask_filter": causal_mask_filter}

