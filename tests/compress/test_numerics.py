"""Quantize/dequantize round trips against a straightforward numpy reference for every granularity, signedness
and width; int4 packing order; onnxruntime's MatMulNBits layout proved by running it."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))
from gsrewrite_builtins.compression.numerics import (
    QuantSpec,
    dequantize,
    expand_scale,
    matmul_nbits,
    pack_int4,
    quantize,
    unpack_int4,
)


def reference(w: np.ndarray, spec: QuantSpec) -> np.ndarray:
    """Loop over the groups the spec defines; quantize each with its own range; dequantize."""
    out = np.empty_like(w)
    low, high = spec.q_range
    if spec.granularity == "tensor":
        groups = [(slice(None),) * w.ndim]
    elif spec.granularity == "channel":
        groups = [tuple(slice(c, c + 1) if d == spec.axis else slice(None) for d in range(w.ndim))
                  for c in range(w.shape[spec.axis])]
    else:
        blocks = [tuple(slice(b, b + spec.block_size) if d == spec.axis else slice(None) for d in range(w.ndim))
                  for b in range(0, w.shape[spec.axis], spec.block_size)]
        groups = [column for block in blocks for column in _columns(w, block, spec.axis)]
    for g in groups:
        x = w[g].astype(np.float64)
        if spec.symmetric and spec.bits == 8:
            scale = np.abs(x).max() / 127
            zero = 0
        elif spec.symmetric:
            flat = x.reshape(-1)
            scale = flat[np.abs(flat).argmax()] / -8  # the largest magnitude maps to -8 (MLAS)
            zero = 0
        else:
            lo, hi = min(x.min(), 0.0), max(x.max(), 0.0)
            scale = (hi - lo) / (high - low)
            zero = np.clip(round(-lo / scale), low, high) if scale else 0
        scale = scale or 1.0
        q = np.clip(np.round(x / scale) + zero, low, high)
        out[g] = (q - zero) * scale
    return out


def _columns(w: np.ndarray, block: tuple, axis: int):
    """A block spans one index of every other axis: split it."""
    other = [d for d in range(w.ndim) if d != axis]
    for index in np.ndindex(*[w.shape[d] for d in other]):
        g = list(block)
        for d, i in zip(other, index, strict=True):
            g[d] = slice(i, i + 1)
        yield tuple(g)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(("granularity", "axis"), [("tensor", 0), ("channel", 0), ("channel", 1), ("block", 0),
                                                   ("block", 1)])
def test_round_trip_matches_the_reference(bits: int, symmetric: bool, granularity: str, axis: int) -> None:
    rng = np.random.default_rng(bits * 10 + symmetric)
    w = (rng.standard_normal((40, 24)) * rng.uniform(0.1, 3.0, (1, 24))).astype(np.float32)  # 40: partial block
    spec = QuantSpec(bits, symmetric, granularity, axis, 16)
    qz = quantize(w, spec)
    np.testing.assert_allclose(dequantize(qz), reference(w, spec), rtol=1e-5, atol=1e-6)
    low, high = spec.q_range
    assert qz.q.min() >= low and qz.q.max() <= high and qz.q.shape == w.shape
    # every element is within half a step of its group's scale (a step for symmetric int4: the side opposite the
    # largest magnitude ends at 7 steps, not 8)
    steps = 1.0 if (bits == 4 and symmetric) else 0.5
    assert np.all(np.abs(dequantize(qz) - w) <= np.abs(expand_scale(qz.scale, w.shape, spec)) * steps + 1e-6)
    if granularity == "block":
        expected = list(w.shape)
        expected[axis] = math.ceil(w.shape[axis] / 16)
        assert list(qz.scale.shape) == expected


def test_all_zero_groups_give_zeros_not_nan() -> None:
    w = np.zeros((32, 4), np.float32)
    w[:, 1] = np.linspace(-1, 1, 32)
    for symmetric in (True, False):
        qz = quantize(w, QuantSpec(4, symmetric, "channel", 1))
        assert np.all(np.isfinite(qz.scale)) and np.all(qz.scale != 0)
        assert np.all(dequantize(qz)[:, [0, 2, 3]] == 0)


def test_int4_packing_puts_the_first_element_in_the_low_nibble() -> None:
    assert pack_int4(np.array([1, 2, 3])).tolist() == [0x21, 0x03]
    assert pack_int4(np.array([-1, 7])).tolist() == [0x7F]
    codes = np.array([-8, -1, 0, 7, 3], np.int8)
    assert unpack_int4(pack_int4(codes), 5, signed=True).tolist() == codes.tolist()
    assert unpack_int4(pack_int4(np.array([15, 0, 9])), 3, signed=False).tolist() == [15, 0, 9]


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="power of two"):
        QuantSpec(4, True, "block", 0, 15).validate()
    with pytest.raises(ValueError, match="4 or 8"):
        QuantSpec(3).validate()


@pytest.mark.parametrize(("k", "n", "block", "bits", "symmetric"), [
    (64, 32, 32, 4, True), (64, 32, 32, 4, False), (80, 24, 32, 4, False), (96, 8, 16, 4, True),
    (64, 16, 32, 8, True), (80, 16, 16, 8, False)])
def test_matmul_nbits_layout_runs_in_onnxruntime(k: int, n: int, block: int, bits: int, symmetric: bool) -> None:
    rng = np.random.default_rng(k + n)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b, scales, zero_points, qz = matmul_nbits(w, block, symmetric, bits)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "S")]
    inputs = ["x", "B", "S"]
    if zero_points is not None:
        inits.append(numpy_helper.from_array(zero_points, "Z"))
        inputs.append("Z")
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((3, k)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ dequantize(qz), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(("k", "n", "block"), [(256, 96, 32), (200, 40, 64), (64, 8, 16)])
def test_int4_matmul_nbits_equals_onnxruntimes_quantizer_bit_for_bit(k: int, n: int, block: int,
                                                                    symmetric: bool) -> None:
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    rng = np.random.default_rng(k + n + block)
    w = (rng.standard_normal((k, n)) * rng.uniform(0.01, 2.0, size=(1, n))).astype(np.float32)
    w[:block, 0] = 0.0  # an all-zero block
    w[block:2 * block, 1] = np.where(np.arange(block) % 2, 0.5, -0.5)  # equal magnitudes: MLAS takes the min
    w[2 * block, 2] = 1e-12  # a tiny value next to ordinary ones
    blocks = math.ceil(k / block)
    padded = np.zeros((blocks * block, n), dtype=np.float32)
    padded[:k] = w
    packed = np.zeros((n, blocks, block // 2), dtype=np.uint8)
    zero_points = np.zeros((n, (blocks + 1) // 2), dtype=np.uint8)
    scales = np.zeros((n, blocks), dtype=np.float32)
    quantize_matmul_4bits(packed, padded, scales, zero_points, block, n, k, symmetric)  # as its quantizer calls it

    b, our_scales, our_zero_points, _ = matmul_nbits(w, block, symmetric)
    assert b.shape == packed.shape
    nonzero = scales.reshape(-1) != 0  # all-zero block: onnxruntime stores scale 0, gsrewrite 1 (both give 0)
    np.testing.assert_array_equal(b, packed)
    np.testing.assert_array_equal(our_scales[nonzero], scales.reshape(-1)[nonzero])
    if not symmetric:
        np.testing.assert_array_equal(our_zero_points, zero_points.reshape(-1))


def _weighted_error(w: np.ndarray, qz: Any, weight: np.ndarray) -> np.ndarray:
    """Per block (blocks of 32 along axis 0, per column) the error the search minimizes, with the weights given."""
    diff = (dequantize(qz) - w) ** 2 * weight
    return diff.reshape(-1, 32, w.shape[1]).sum(axis=1)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bits", [4, 8])
def test_the_scale_search_never_does_worse_than_round_to_nearest(symmetric: bool, bits: int) -> None:
    """Per block, in the error it minimizes (k-quant importance rms + |x|): round to nearest's codes are one of its
    candidates; over a heavy-tailed weight it does better on the whole, and its codes stay in the code range."""
    rng = np.random.default_rng(bits + symmetric)
    w = (rng.standard_t(4, (256, 48)) * rng.uniform(0.01, 1.0, (1, 48))).astype(np.float32)
    w[:32, 0] = 0.0  # an all-zero block
    w[32:64, 1] = 0.25  # a constant block
    rtn = quantize(w, QuantSpec(bits, symmetric, "block", 0, 32))
    searched = quantize(w, QuantSpec(bits, symmetric, "block", 0, 32, "search"))
    low, high = searched.spec.q_range
    assert searched.q.min() >= low and searched.q.max() <= high and np.all(np.isfinite(searched.scale))
    blocks = w.reshape(-1, 32, 48)
    importance = np.sqrt((blocks ** 2).mean(axis=1, keepdims=True)) + np.abs(blocks)
    weight = importance.reshape(w.shape)
    ours, theirs = _weighted_error(w, searched, weight), _weighted_error(w, rtn, weight)
    assert np.all(ours <= theirs * (1 + 1e-4) + 1e-9)
    assert ours.sum() < 0.95 * theirs.sum()
    assert np.all(dequantize(searched)[:32, 0] == 0)
    if not symmetric:
        np.testing.assert_allclose(dequantize(searched)[32:64, 1], 0.25, rtol=1e-6)


def test_channel_weights_steer_the_search_to_the_channels_that_matter() -> None:
    """A linear layer's error is its weight error times each input channel's squared activations: with channels
    of large activations weighted, their elements come out closer than without (and the others farther)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((128, 64)).astype(np.float32)
    loud = np.zeros(128, np.float32) + 0.01
    loud[::8] = 100.0  # every eighth input channel carries large activations
    spec = QuantSpec(4, False, "block", 0, 32, "search")
    plain, steered = quantize(w, spec), quantize(w, spec, channel_weight=loud)
    err_plain, err_steered = (dequantize(plain) - w) ** 2, (dequantize(steered) - w) ** 2
    assert err_steered[::8].sum() < 0.6 * err_plain[::8].sum()
    x = rng.standard_normal((256, 128)).astype(np.float32) * np.sqrt(loud)
    assert np.square(x @ (dequantize(steered) - w)).sum() < np.square(x @ (dequantize(plain) - w)).sum()


@pytest.mark.parametrize("symmetric", [True, False])
def test_searched_matmul_nbits_runs_in_onnxruntime(symmetric: bool) -> None:
    rng = np.random.default_rng(5)
    k, n = 96, 24
    w = rng.standard_normal((k, n)).astype(np.float32)
    b, scales, zero_points, qz = matmul_nbits(w, 32, symmetric, 4, "search", np.linspace(0.1, 2, k))
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "S")]
    inputs = ["x", "B", "S"]
    if zero_points is not None:
        inits.append(numpy_helper.from_array(zero_points, "Z"))
        inputs.append("Z")
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=4, block_size=32)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((3, k)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ dequantize(qz), rtol=1e-4, atol=1e-4)


def test_an_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="method"):
        QuantSpec(4, True, "block", 0, 32, "gptq").validate()
