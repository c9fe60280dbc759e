"""rotary: rotate-half with constant cos/sin tables -> RotaryEmbedding; what must not fuse."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

B, H, S, DH = 2, 2, 6, 8


def tables(equal_halves: bool = True) -> tuple[np.ndarray, np.ndarray]:
    freq = 1.0 / (10000 ** (np.arange(0, DH, 2) / DH))
    angles = np.outer(np.arange(S), freq)
    full = np.concatenate([angles, angles if equal_halves else angles * 2], axis=-1)
    return np.cos(full)[None, None].astype(np.float32), np.sin(full)[None, None].astype(np.float32)


def rotary_model(second_half_start: int = DH // 2, equal_halves: bool = True):
    text = """
    g (float[2, 2, 6, 8] x) => (float[2, 2, 6, 8] y) {
        x2 = Slice (x, s2, e2, axes)
        n = Neg (x2)
        x1 = Slice (x, s1, e1, axes)
        r = Concat <axis = -1> (n, x1)
        c = Mul (x, cos)
        s = Mul (sin, r)
        y = Add (c, s)
    }"""
    cos, sin = tables(equal_halves)
    inits = {"s2": np.array([second_half_start]), "e2": np.array([2**62]), "s1": np.array([0]),
             "e1": np.array([DH // 2]), "axes": np.array([-1]), "cos": cos, "sin": sin}
    return model_from_text(text, initializers=inits)


def test_rotate_half_becomes_rotary_embedding():
    result = assert_rewrite(rotary_model(), ["rotary"], {"rotary": 1},
                            produces={"com.microsoft.RotaryEmbedding": 1}, absent=["Neg", "Concat"])
    caches = {i.name: i for i in result.model.graph.initializer}
    assert sum(1 for i in caches.values() if list(i.dims) == [S, DH // 2]) == 2


def test_slices_that_are_not_halves_are_not_fused():
    result = assert_no_rewrite(rotary_model(second_half_start=3), ["rotary"])
    assert "two halves" in result.near_misses["rotary"].reason


def test_tables_without_equal_halves_are_not_fused():
    result = assert_no_rewrite(rotary_model(equal_halves=False), ["rotary"])
    assert "equal halves" in result.near_misses["rotary"].reason
