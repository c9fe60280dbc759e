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
unidirectional Attention with the raw mask as ``mask_index``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.engine.match import CheckFailed, Match
from gsrewrite_builtins.producers import NotProven, computation, run, stand_in, submodel

#: A masked position must be at least this negative (onnxruntime's own default is -10000).
MAX_FILTER_VALUE = -1e4
#: What onnxruntime gets for a bias of float32's lowest value (or -inf). Both give a fully masked row the same
#: uniform weights: a score below 4e12 vanishes into either when added (ulp(1e20) = 8.8e12), and any other
#: masked key gets exactly 0 from either. onnxruntime's CPU attention is ~4% faster with it (bert.legacy, 3
#: sessions each among 24: 1.048 -> 0.998 ms; -1e12 alike, float32 min not).
ORT_LOWEST_FILTER = -1e20


@dataclass(frozen=True)
class PaddingBias:
    """What a proven bias computes: the raw mask input and the value masked positions get."""

    mask: gs.Variable
    filter_value: float


#: (id(bias tensor), causal) -> (bias tensor, PaddingBias or the reason it is not one): each check runs once
_ANALYSED: dict[tuple[int, bool], tuple[gs.Tensor, PaddingBias | str]] = {}


def padding_mask_bias(match: Match) -> str | None:
    """The bound ``bias`` is an additive padding bias computed from one 2-D mask input (proven by running it)."""
    result = _analysis(match, causal=False)
    return result if isinstance(result, str) else None


def padding_mask_input(match: Match) -> gs.Variable:
    """The raw [batch, sequence] mask input the bias was computed from."""
    return _proven(match, causal=False).mask


def padding_mask_filter(match: Match) -> float:
    """The value the bias gives masked positions, as onnxruntime's ``mask_filter_value``."""
    return _for_onnxruntime(_proven(match, causal=False).filter_value)


def causal_mask_bias(match: Match) -> str | None:
    """The bound ``bias`` masks exactly the padded keys (of one 2-D mask input) and the future ones."""
    result = _analysis(match, causal=True)
    return result if isinstance(result, str) else None


def causal_mask_input(match: Match) -> gs.Variable:
    """The raw [batch, sequence] mask input of a proven causal + padding bias."""
    return _proven(match, causal=True).mask


def causal_mask_filter(match: Match) -> float:
    """The value a proven causal + padding bias gives masked positions, as onnxruntime's ``mask_filter_value``."""
    return _for_onnxruntime(_proven(match, causal=True).filter_value)


def _for_onnxruntime(filter_value: float) -> float:
    """The exporter's masked value, or ORT_LOWEST_FILTER for one at least as negative (same results, faster)."""
    return max(filter_value, ORT_LOWEST_FILTER)


def _proven(match: Match, causal: bool) -> PaddingBias:
    result = _analysis(match, causal)
    if isinstance(result, str):
        raise CheckFailed(result)
    return result


def _analysis(match: Match, causal: bool) -> PaddingBias | str:
    bias = match.tensor("bias")
    if bias is None:
        return "no additive bias"
    cached = _ANALYSED.get((id(bias), causal))
    if cached is not None and cached[0] is bias:
        return cached[1]
    if len(_ANALYSED) > 256:
        _ANALYSED.clear()
    try:
        result: PaddingBias | str = _analyse(match, bias, causal)
    except NotProven as exc:
        result = str(exc)
    _ANALYSED[(id(bias), causal)] = (bias, result)
    return result


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
    dims = _test_dims(mask)
    feeds_per_case = [_feeds(mask, shape_inputs, dims, case) for case in range(2)]
    model = submodel(match.opset, found.nodes, [mask, *shape_inputs], bias)
    filter_value: float | None = None
    for feeds in feeds_per_case:
        value = run(model, feeds, "the bias computation")
        filter_value = _check_padding(value, feeds[mask.name], filter_value, causal)
    assert filter_value is not None
    return PaddingBias(mask, filter_value)


def _test_dims(mask: gs.Variable) -> tuple[int, int]:
    """Concrete (batch, sequence) for the mask: static dims as declared, symbolic ones small (2 and 7)."""
    batch, sequence = mask.shape
    return (batch if isinstance(batch, int) and batch > 0 else 2,
            sequence if isinstance(sequence, int) and sequence > 0 else 7)


def _feeds(mask: gs.Variable, shape_inputs: list[gs.Variable], dims: tuple[int, int],
           case: int) -> dict[str, np.ndarray]:
    """Inputs for one test: a mask with holes in different places per row, zeros for shape-only inputs."""
    batch, sequence = dims
    rows = np.arange(batch)[:, None]
    cols = np.arange(sequence)[None, :]
    holes = (cols + rows + case) % 3 == 2
    holes[0, :] = case == 1  # row 0: no padding at all, then everything padded...
    holes[0, 0] = False  # ...but the first position (a fully masked row has no defined attention)
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
    full = value.reshape((1,) * (4 - value.ndim) + value.shape)
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
    found = max(float(masked.flat[0]), float(np.finfo(np.float32).min))  # -inf: the most negative finite float
    if filter_value is not None and found != filter_value:
        raise NotProven("the bias gives masked positions different values for different masks")
    return found


CHECKS = {"padding_mask_bias": padding_mask_bias, "causal_mask_bias": causal_mask_bias}
COMPUTATIONS = {"padding_mask_input": padding_mask_input, "padding_mask_filter": padding_mask_filter,
                "causal_mask_input": causal_mask_input, "causal_mask_filter": causal_mask_filter}

