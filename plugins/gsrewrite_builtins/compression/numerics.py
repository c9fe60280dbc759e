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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GRANULARITIES = ("tensor", "channel", "block")


@dataclass(frozen=True)
class QuantSpec:
    bits: int = 8
    symmetric: bool = True
    granularity: str = "channel"
    axis: int = 0
    block_size: int = 32

    def validate(self) -> None:
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


def quantize(w: np.ndarray, spec: QuantSpec) -> Quantized:
    spec.validate()
    w = np.asarray(w, dtype=np.float32)
    groups, scale_shape = _grouped(w, spec)
    low, high = spec.q_range
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


def matmul_nbits(w: np.ndarray, block_size: int, symmetric: bool, bits: int = 4
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, Quantized]:
    """The ``B``, ``scales`` and ``zero_points`` inputs of com.microsoft MatMulNBits for a MatMul weight ``w``
    [K, N]: blocks of ``block_size`` along K per output column. Codes are stored unsigned: symmetric codes are
    shifted by 8 (4 bits) or 128 (8 bits), the implicit zero point, and ``zero_points`` is None; asymmetric
    zero points are packed two per byte per column (4 bits) or stored as bytes (8 bits). The quantization is
    returned too (its codes before the shift)."""
    k, n = w.shape
    spec = QuantSpec(bits=bits, symmetric=symmetric, granularity="block", axis=0, block_size=block_size)
    qz = quantize(w, spec)
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
