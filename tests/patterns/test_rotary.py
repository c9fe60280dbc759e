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


# LLaMA exported with a dynamic sequence: cos/sin computed at run time from the positions 0..S-1
DYNAMIC = """
    g (float[batch, 2, seq, 8] q, float[batch, 2, seq, 8] k)
      => (float[batch, 2, seq, 8] yq, float[batch, 2, seq, 8] yk) {
        sh = Shape (q)
        n = Gather <axis = 0> (sh, two_i)
        nf = Cast <to = 1> (n)
        pos = Range (zero_f, nf, one_f)
        p2 = Unsqueeze (pos, one_1)
        freqs = Mul (p2, inv_freq)
        emb = Concat <axis = -1> (freqs, SECOND)
        ct = Cos (emb)
        st = Sin (emb)
        cos = Unsqueeze (ct, zero_one)
        sin = Unsqueeze (st, zero_one)
        ROTARY_Q
        ROTARY_K
    }"""


def _rotary_of(x: str) -> str:
    return (f"{x}2 = Slice ({x}, s2, e2, axes)\n {x}n = Neg ({x}2)\n {x}1 = Slice ({x}, s1, e1, axes)\n"
            f"{x}r = Concat <axis = -1> ({x}n, {x}1)\n {x}c = Mul ({x}, cos)\n {x}s = Mul (sin, {x}r)\n"
            f"y{x} = Add ({x}c, {x}s)")


def dynamic_model(equal_halves: bool = True, computed_bounds: bool = False):
    text = DYNAMIC.replace("SECOND", "freqs" if equal_halves else "f2").replace(
        "ROTARY_Q", _rotary_of("q")).replace("ROTARY_K", _rotary_of("k"))
    if computed_bounds:  # the legacy exporter: half = Shape(x)[-1] // 2, heads unknown to inference
        text = text.replace("float[batch, 2, seq, 8]", "float[batch, heads, seq, 8]").replace(
            "sh = Shape (q)", "sh = Shape (q)\n d = Gather <axis = 0> (sh, three_i)\n h = Div (d, two_i)\n"
            "e1 = Unsqueeze (h, zero_1)\n s2 = Identity (e1)")
    if not equal_halves:
        text = text.replace("emb = Concat", "f2 = Add (freqs, freqs)\n emb = Concat")
    inits = {"s2": np.array([DH // 2]), "e2": np.array([2**62]), "s1": np.array([0]), "e1": np.array([DH // 2]),
             "axes": np.array([-1]), "two_i": np.array(2), "zero_f": np.array(0.0, np.float32),
             "one_f": np.array(1.0, np.float32), "one_1": np.array([1]), "zero_one": np.array([0, 1]),
             "inv_freq": (1.0 / (10000 ** (np.arange(0, DH, 2) / DH))).astype(np.float32),
             "three_i": np.array(3), "zero_1": np.array([0])}
    if computed_bounds:
        del inits["e1"], inits["s2"]
    return model_from_text(text, initializers={k: v for k, v in inits.items() if k in text})


def test_run_time_tables_feed_rotary_embedding_their_first_halves():
    result = assert_rewrite(dynamic_model(), ["rotary"], {"rotary-dynamic": 2},
                            produces={"com.microsoft.RotaryEmbedding": 2, "Slice": 2}, absent=["Neg"])
    caches = [n for n in result.model.graph.node if n.op_type == "RotaryEmbedding"]
    assert caches[0].input[2:] == caches[1].input[2:]  # both read one cos and one sin cache


def test_run_time_tables_without_equal_halves_are_not_fused():
    result = assert_no_rewrite(dynamic_model(equal_halves=False), ["rotary"])
    assert "equal halves" in result.near_misses["rotary-dynamic"].reason


def test_slice_bounds_computed_from_the_head_size():
    rng = np.random.default_rng(4)
    qk = {name: rng.standard_normal((2, 3, 5, DH)).astype(np.float32) for name in ("q", "k")}
    result = assert_rewrite(dynamic_model(computed_bounds=True), ["rotary"], {"rotary-dynamic": 2}, inputs=qk,
                            produces={"com.microsoft.RotaryEmbedding": 2}, absent=["Neg", "Div"])
    node = next(n for n in result.model.graph.node if n.op_type == "RotaryEmbedding")
    assert next(a.i for a in node.attribute if a.name == "num_heads") == 0  # read from the 4-D input
