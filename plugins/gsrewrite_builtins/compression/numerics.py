"""Weight quantization numerics (numpy only): per-tensor, per-channel and per-block scales, symmetric and
asymmetric, 8 and 4 bits, the int4 packing ONNX uses and onnxruntime's MatMulNBits layout.

Conventions (those of ONNX ``DequantizeLinear``: ``x = (q - zero_point) * scale``):

* symmetric: signed codes, zero point 0; int8: scale = max|w| / 127 (codes in [-127, 127], the restricted range
  onnxruntime uses for weights); int4: scale = m / -8 where m is the group's value of largest magnitude, with
  its sign (codes in [-8, 7]: m itself maps to -8, using the whole range; onnxruntime's MLAS does the same, and
  the scale is negative when m is);
* asymmetric: unsigned codes (uint8 [0, 255], uint4 [0, 15]); the range is widened to include 0, scale =
  (max - min) / levels, zero point = round(-min / scale);
* granularity: ``tensor`` (one scale), ``channel`` (one per index of ``axis``), ``block`` (``block_size``
  consecutive elements along ``axis`` share a scale; the scale has the weight's shape with that axis divided,
  rounded up: ONNX opset-21 blocked quantization, a last partial block allowed);
* an all-zero group gets scale 1 (never 0, never NaN);
* 4-bit codes are computed with onnxruntime MLAS's float32 arithmetic (reciprocal of the scale, ties rounded
  up), so that a MatMulNBits weight equals the one onnxruntime's quantizer makes, bit for bit.

Methods: ``rtn`` (round to nearest with the scale and zero point above: onnxruntime's and the onnxruntime-genai
builder's) and ``search`` (:func:`search_groups`, k-quant style: per group, the scale (and zero point) minimizing
the group's weighted squared error, searched over candidate scales as llama.cpp's ``make_qkx2_quants`` /
``make_qx_quants`` and onnxruntime's ``k_quant`` do, each refined by least squares; never worse than ``rtn`` in that
error). The codes of ``search`` are the nearest codes for its scale and zero point: the same ``DequantizeLinear``
semantics, other scales.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GRANULARITIES = ("tensor", "channel", "block")
METHODS = ("rtn", "search")
#: candidate scales of the search: ``SEARCH_STEPS`` steps of ``SEARCH_DELTA`` levels around the range's own (llama.cpp's
#: and onnxruntime k_quant's schedule; 8 steps of 0.25 gave the same weight error on SmolLM2, KL 0.224 against 0.221,
#: top-1 0.750 against 0.762, in 18 s against 27 s: benchmarks/results/int4_quality.md)
SEARCH_STEPS = 20
SEARCH_DELTA = 0.1
#: elements the search works on at once
SEARCH_CHUNK = 1 << 16


@dataclass(frozen=True)
class QuantSpec:
    bits: int = 8
    symmetric: bool = True
    granularity: str = "channel"
    axis: int = 0
    block_size: int = 32
    method: str = "rtn"

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {self.method!r}")
        if self.bits not in (4, 8):
            raise ValueError(f"bits must be 4 or 8, not {self.bits}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}, not {self.granularity!r}")
        if self.granularity == "block" and (self.block_size < 16 or self.block_size > 256
                                            or self.block_size & (self.block_size - 1)):
            raise ValueError(f"block size must be a power of two from 16 to 256, not {self.block_size}")

    @property
    def q_range(self) -> tuple[int, int]:
        if self.symmetric:
            return (-127, 127) if self.bits == 8 else (-8, 7)
        return (0, 255) if self.bits == 8 else (0, 15)

    @property
    def code_dtype(self) -> np.dtype:
        return np.dtype(np.int8 if self.symmetric else np.uint8)


@dataclass
class Quantized:
    """Codes (one per weight element, unpacked), scales and zero points (same shape as the scales)."""

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    spec: QuantSpec


def _grouped(w: np.ndarray, spec: QuantSpec) -> tuple[np.ndarray, tuple[int, ...]]:
    """``w`` viewed as [groups..., group elements] along the reduction, and the scale shape."""
    axis = spec.axis % w.ndim if w.ndim else 0
    if spec.granularity == "tensor":
        return w.reshape(1, -1), ()
    if spec.granularity == "channel":
        moved = np.moveaxis(w, axis, 0)
        return moved.reshape(moved.shape[0], -1), (w.shape[axis],)
    size = w.shape[axis]
    blocks = math.ceil(size / spec.block_size)
    padded = blocks * spec.block_size
    moved = np.moveaxis(w, axis, -1)
    if padded != size:
        pad = [(0, 0)] * (moved.ndim - 1) + [(0, padded - size)]
        moved = np.pad(moved, pad)
    grouped = moved.reshape(*moved.shape[:-1], blocks, spec.block_size)
    scale_shape = list(w.shape)
    scale_shape[axis] = blocks
    return grouped.reshape(-1, spec.block_size), tuple(scale_shape)


def _scale_layout(values: np.ndarray, w: np.ndarray, spec: QuantSpec, scale_shape: tuple[int, ...]) -> np.ndarray:
    """Per-group values (in the grouped order) reshaped to the ONNX scale shape."""
    if spec.granularity != "block":
        return values.reshape(scale_shape)
    axis = spec.axis % w.ndim
    moved_shape = [*np.moveaxis(np.empty(w.shape, dtype=np.uint8), axis, -1).shape[:-1], scale_shape[axis]]
    return np.moveaxis(values.reshape(moved_shape), -1, axis)


def quantize(w: np.ndarray, spec: QuantSpec, channel_weight: np.ndarray | None = None) -> Quantized:
    """``channel_weight``: for ``search`` at block granularity, how much each index of the reduction axis matters
    (a linear layer's mean squared input per channel): the search's error weights each element by it."""
    spec.validate()
    w = np.asarray(w, dtype=np.float32)
    groups, scale_shape = _grouped(w, spec)
    low, high = spec.q_range
    if spec.method == "search":
        weight = None
        if channel_weight is not None and spec.granularity == "block":
            weight, _ = _grouped(np.broadcast_to(_along(channel_weight, w, spec.axis), w.shape), spec)
        scale, zero, codes = search_groups(groups, spec, weight)
        q = _ungroup(codes, w, spec).astype(spec.code_dtype)
        return Quantized(q, _scale_layout(scale, w, spec, scale_shape).astype(np.float32),
                         _scale_layout(zero, w, spec, scale_shape).astype(spec.code_dtype), spec)
    if spec.symmetric and spec.bits == 8:
        scale = np.abs(groups).max(axis=1) / 127.0
        zero = np.zeros_like(scale)
    elif spec.symmetric:  # MLAS: the larger magnitude of max and min, min on a tie
        hi, lo = groups.max(axis=1), groups.min(axis=1)
        scale = np.where(np.abs(hi) > np.abs(lo), hi, lo).astype(np.float32) / np.float32(-8.0)
        zero = np.zeros_like(scale)
    else:
        lo = np.minimum(groups.min(axis=1), 0.0)
        hi = np.maximum(groups.max(axis=1), 0.0)
        scale = (hi - lo) / np.float32(high - low)
        ratio = -lo / np.where(scale > 0, scale, 1.0)
        zero = np.where(scale > 0, np.clip(_round_half_up(ratio) if spec.bits == 4 else np.round(ratio), low, high),
                        0.0)
    if spec.bits == 4:
        codes = _mlas_codes(groups, scale.astype(np.float32), zero, spec)
    else:
        codes = np.clip(np.round(groups / np.where(scale != 0, scale, 1.0)[:, None]) + zero[:, None], low, high)
    scale = np.where(scale != 0, scale, 1.0).astype(np.float32)
    q = _ungroup(codes, w, spec).astype(spec.code_dtype)
    return Quantized(q, _scale_layout(scale, w, spec, scale_shape).astype(np.float32),
                     _scale_layout(zero, w, spec, scale_shape).astype(spec.code_dtype), spec)


def _along(values: np.ndarray, w: np.ndarray, axis: int) -> np.ndarray:
    """A vector over ``axis`` of ``w`` shaped to broadcast against it."""
    shape = [1] * w.ndim
    shape[axis % w.ndim] = w.shape[axis % w.ndim]
    return np.asarray(values, np.float32).reshape(shape)


def search_groups(groups: np.ndarray, spec: QuantSpec, weight: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scale, zero point and codes per group (rows of ``groups``) minimizing ``sum(weight * (x - x_hat)^2)`` with the
    k-quant importance ``weight = rms(group) + |x|`` (large values matter more, as in llama.cpp's
    ``make_qkx2_quants`` and onnxruntime's ``k_quant``).

    Candidate inverse scales are ``(levels + SEARCH_DELTA * i) / range`` for ``SEARCH_STEPS`` values of ``i``
    around 0, round to nearest's among them. Symmetric (zero point 0, MatMulNBits' implicit 8): over the largest
    magnitude with its sign, as MLAS; each candidate's codes get their least-squares scale. Asymmetric: over the
    range widened to include 0; each candidate's codes get their least-squares scale and offset, the offset is
    rounded to an integer zero point in the code range, the group requantized to the nearest codes for that scale
    and zero point, and the scale refitted to those codes. Per group the candidate of least error is kept: never
    more error than round to nearest (whose codes are a candidate, with a scale fitted to them). Groups are searched
    SEARCH_CHUNK elements at a time (the temporaries stay in the CPU's caches)."""
    x = np.asarray(groups, dtype=np.float32)
    rows = max(1, SEARCH_CHUNK // max(1, x.shape[1]))
    if len(x) > rows:
        parts = [_search(x[start:start + rows], spec, None if weight is None else weight[start:start + rows])
                 for start in range(0, len(x), rows)]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]
    return _search(x, spec, weight)


def _search(x: np.ndarray, spec: QuantSpec, weight: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    low, high = spec.q_range
    if weight is None:
        importance = np.sqrt(_rowsum(x * x) / x.shape[1])[:, None] + np.abs(x)
    else:  # llama.cpp's with an importance matrix: the channel's weight x sqrt(sigma^2 + x^2)
        importance = np.asarray(weight, np.float32) * np.sqrt(_rowsum(x * x)[:, None] / x.shape[1] + x * x)
    wx = importance * x
    sxx = _rowsum(wx * x)
    if spec.symmetric:
        hi, lo = x.max(axis=1), x.min(axis=1)
        peak = np.where(np.abs(hi) > np.abs(lo), hi, lo)  # the signed largest magnitude (MLAS)
        extent = np.where(peak != 0, peak, 1.0).astype(np.float32)
        levels = float(-low)  # peak -> low (-8 / -127)
        best = (np.full(len(x), np.inf, np.float32), np.zeros(len(x), np.float32), np.zeros(len(x), np.float32))
        for target in _targets(levels):
            inverse = (-target / extent).astype(np.float32)
            codes = np.clip(np.round(x * inverse[:, None]), low, high)
            sxl, sll = _rowsum(wx * codes), _rowsum(importance * codes * codes)
            scale = np.divide(sxl, sll, out=np.zeros_like(sxl), where=sll > 0)
            error = _error(x, importance, scale, codes, sxx - scale * sxl, spec)
            better = error < best[0]
            best = (np.where(better, error, best[0]), np.where(better, inverse, best[1]),
                    np.where(better, scale, best[2]))
        _, inverse, scale = best
        codes = np.clip(np.round(x * inverse[:, None]), low, high)
        zero = np.zeros(len(x), np.float32)
    else:
        lo, hi = np.minimum(x.min(axis=1), 0.0), np.maximum(x.max(axis=1), 0.0)
        extent = np.where(hi > lo, hi - lo, 1.0).astype(np.float32)
        levels = float(high - low)
        sw, sx = _rowsum(importance), _rowsum(wx)
        kept = (np.full(len(x), np.inf, np.float32), np.ones(len(x), np.float32), np.zeros(len(x), np.float32),
                np.ones(len(x), np.float32))  # error, quantizing scale, zero point, fitted scale
        for target in _targets(levels):
            rtn = extent / np.float32(target)
            if target == levels:  # round to nearest: its own scale and zero point
                scale, zero = rtn, np.clip(np.round(-lo / rtn), low, high)
            else:
                codes = np.clip(np.round((x - lo[:, None]) * (1 / rtn)[:, None]), low, high)
                wl = importance * codes
                sl, sll, sxl = _rowsum(wl), _rowsum(wl * codes), _rowsum(wx * codes)
                det = sw * sll - sl * sl
                ok = det > 0
                scale = np.where(ok, np.divide(sw * sxl - sx * sl, det, out=np.zeros_like(det), where=ok), rtn)
                scale = np.where(scale > 0, scale, rtn)
                offset = np.where(ok, np.divide(sll * sx - sl * sxl, det, out=np.zeros_like(det), where=ok), lo)
                zero = np.clip(np.round(-offset / scale), low, high)
            shifted = np.clip(np.round(x * (1 / scale)[:, None]) + zero[:, None], low, high) - zero[:, None]
            sxc, scc = _rowsum(wx * shifted), _rowsum(importance * shifted * shifted)
            fitted = np.divide(sxc, scc, out=np.zeros_like(sxc), where=scc > 0)
            error = _error(x, importance, fitted, shifted, sxx - fitted * sxc, spec)
            better = (error < kept[0]) & (fitted > 0)
            kept = (np.where(better, error, kept[0]), np.where(better, scale, kept[1]),
                    np.where(better, zero, kept[2]), np.where(better, fitted, kept[3]))
        _, quantizing, zero, scale = kept
        zero = zero.astype(np.float32)
        codes = np.clip(np.round(x * (1 / quantizing)[:, None]) + zero[:, None], low, high)
    flat = (scale == 0) | ~np.isfinite(scale)  # an all-zero group: scale 1, codes at the zero point
    scale = np.where(flat, 1.0, scale).astype(np.float32)
    codes = np.where(flat[:, None], zero[:, None], codes)
    return scale, zero, codes.astype(np.float32)


def _error(x: np.ndarray, importance: np.ndarray, scale: np.ndarray, codes: np.ndarray, closed: np.ndarray,
           spec: QuantSpec) -> np.ndarray:
    """The weighted squared error of ``scale * codes`` (codes less their zero point), per row: ``closed``, the
    least-squares identity ``sum(w x^2) - s sum(w x c)``, at 4 bits; summed element by element at 8 bits, whose
    error is too small a share of ``sum(w x^2)`` for float32 to tell candidates apart by that difference."""
    if spec.bits == 4:
        return closed
    return _rowsum(importance * np.square(x - scale[:, None] * codes))


def _targets(levels: float) -> list[float]:
    """The code-range widths the search tries: ``levels`` (round to nearest) and SEARCH_STEPS around it."""
    around = [levels + SEARCH_DELTA * (step - SEARCH_STEPS // 2) for step in range(SEARCH_STEPS + 1)]
    return [levels] + [t for t in around if t != levels and t > 1]


def _rowsum(a: np.ndarray) -> np.ndarray:
    """Each row's sum, through a matrix-vector product (numpy's reduction over short rows is several times
    slower)."""
    return a @ np.ones(a.shape[1], a.dtype)


def _mlas_codes(groups: np.ndarray, scale: np.ndarray, zero: np.ndarray, spec: QuantSpec) -> np.ndarray:
    """4-bit codes computed as onnxruntime's MLAS does (``BlockwiseQuantizer`` in q4_dq.cpp), in float32: the
    weight times the reciprocal of the scale plus the unsigned zero point (8 when symmetric), rounded half away
    from zero, clamped to [0, 15]; returned in ``spec``'s code range. The same weights then give the same
    MatMulNBits as onnxruntime's quantizer, bit for bit."""
    reciprocal = np.divide(np.float32(1.0), scale, out=np.zeros_like(scale), where=scale != 0)
    offset = 8 if spec.symmetric else 0
    unsigned_zero = (zero + offset).astype(np.float32)
    x = groups.astype(np.float32) * reciprocal[:, None] + unsigned_zero[:, None]
    return np.clip(_round_half_up(x), 0, 15) - offset


def _round_half_up(x: np.ndarray) -> np.ndarray:
    """``roundf`` for the non-negative values it is used on here (ties up), exactly: ``x - floor(x)`` is exact."""
    floor = np.floor(x)
    return floor + (x - floor >= 0.5)


def _ungroup(groups: np.ndarray, w: np.ndarray, spec: QuantSpec) -> np.ndarray:
    if spec.granularity == "tensor":
        return groups.reshape(w.shape)
    axis = spec.axis % w.ndim
    if spec.granularity == "channel":
        moved_shape = np.moveaxis(np.empty(w.shape, dtype=np.uint8), axis, 0).shape
        return np.moveaxis(groups.reshape(moved_shape), 0, axis)
    moved: tuple[int, ...] = tuple(np.moveaxis(np.empty(w.shape, dtype=np.uint8), axis, -1).shape)
    size = moved[-1]
    flat = groups.reshape(*moved[:-1], -1)[..., :size]
    return np.moveaxis(flat, -1, axis)


def expand_scale(values: np.ndarray, shape: tuple[int, ...], spec: QuantSpec) -> np.ndarray:
    """Scales or zero points broadcast to the weight's shape (the DequantizeLinear rule)."""
    if spec.granularity == "tensor":
        return np.broadcast_to(values, shape)
    axis = spec.axis % len(shape)
    if spec.granularity == "channel":
        view = [1] * len(shape)
        view[axis] = shape[axis]
        return np.broadcast_to(values.reshape(view), shape)
    repeated = np.repeat(values, spec.block_size, axis=axis)
    return np.take(repeated, np.arange(shape[axis]), axis=axis)


def dequantize(qz: Quantized) -> np.ndarray:
    shape = qz.q.shape
    scale = expand_scale(qz.scale, shape, qz.spec)
    zero = expand_scale(qz.zero_point.astype(np.int32), shape, qz.spec)
    return ((qz.q.astype(np.int32) - zero) * scale).astype(np.float32)


def pack_int4(codes: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte, the first in the low nibble (ONNX int4/uint4 storage); odd counts pad a 0."""
    flat = np.asarray(codes).reshape(-1).astype(np.int16) & 0x0F
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, flat.dtype)])
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def unpack_int4(packed: np.ndarray, count: int, signed: bool) -> np.ndarray:
    raw = np.asarray(packed, dtype=np.uint8).reshape(-1)
    low, high = raw & 0x0F, raw >> 4
    flat = np.stack([low, high], axis=1).reshape(-1)[:count].astype(np.int8)
    if signed:
        flat = np.where(flat > 7, flat - 16, flat).astype(np.int8)
    return flat


def matmul_nbits(w: np.ndarray, block_size: int, symmetric: bool, bits: int = 4, method: str = "rtn",
                 channel_weight: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, Quantized]:
    """The ``B``, ``scales`` and ``zero_points`` inputs of com.microsoft MatMulNBits for a MatMul weight ``w``
    [K, N]: blocks of ``block_size`` along K per output column. Codes are stored unsigned: symmetric codes are
    shifted by 8 (4 bits) or 128 (8 bits), the implicit zero point, and ``zero_points`` is None; asymmetric
    zero points are packed two per byte per column (4 bits) or stored as bytes (8 bits). The quantization is
    returned too (its codes before the shift)."""
    k, n = w.shape
    spec = QuantSpec(bits=bits, symmetric=symmetric, granularity="block", axis=0, block_size=block_size,
                     method=method)
    qz = quantize(w, spec, channel_weight)
    blocks = math.ceil(k / block_size)
    shift = (8 if bits == 4 else 128) if symmetric else 0
    padded = np.zeros((blocks * block_size, n), dtype=np.int16)
    padded[:k] = qz.q.astype(np.int16) + shift
    per_column = padded.T.reshape(n, blocks, block_size)  # [N, blocks, block]
    if bits == 4:
        b = pack_int4(per_column.reshape(-1)).reshape(n, blocks, block_size // 2)
    else:
        b = per_column.astype(np.uint8)
    scales = qz.scale.T.reshape(-1).astype(np.float32)  # [N * blocks]
    zero_points = None
    if not symmetric:
        zp = qz.zero_point.astype(np.int16).T  # [N, blocks]
        if bits == 4:
            zero_points = np.stack([pack_int4(row) for row in zp]).reshape(-1) if n else np.zeros(0, np.uint8)
        else:
            zero_points = zp.astype(np.uint8).reshape(-1)
    return b, scales, zero_points, qz


def error_stats(w: np.ndarray, w_hat: np.ndarray) -> dict[str, float]:
    a, b = np.asarray(w, np.float64).reshape(-1), np.asarray(w_hat, np.float64).reshape(-1)
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return {"max_abs": float(np.abs(a - b).max()) if a.size else 0.0,
            "cosine": float(a @ b / denom) if denom else 1.0,
            "rmse": float(np.sqrt(np.mean((a - b) ** 2))) if a.size else 0.0}
