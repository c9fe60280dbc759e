"""Hypothesis strategies: one per pattern family, each drawing a :class:`~fuzz.cases.Case` (a model with
random sizes, spellings, constants and near misses). ``label`` records every choice, so a shrunk failure
reads as the model it is."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from . import elementwise as el
from . import masks
from .attention import Heads, attention_case
from .cases import Case
from .norms import Embed, Norm, embed_layernorm, layernorm, rmsnorm, skip_layernorm
from .spellings import GELU_PRODUCTS, KEYS, SCORES

MASKS = ("none", "padding-legacy", "padding-plain", "padding-where", "causal", "sliding-window", "band",
         "prefix-lm", "chunked", "anti-causal", "alibi", "causal-table", "window-table", "random-table",
         "trilu-causal", "trilu-window", "float-input", "float-input-per-head",
         "float-input-two-adds")
#: near misses of a scale, an epsilon-free constant or a mean axis: mostly exact, sometimes slightly off
NEAR = st.sampled_from([1.0] * 10 + [1.0001, 0.999, 1.01, 0.5, 2.0])
#: an intermediate with an outside consumer: now and then
SELDOM = st.sampled_from([False] * 4 + [True])
EPSILONS = st.sampled_from([1e-12, 1e-6, 1e-5, 1e-3, 0.1]) | st.floats(1e-12, 1e-2)
seeds = st.integers(0, 2**16)


def _bias(draw: st.DrawFn, kind: str, heads: int) -> tuple[masks.Bias | None, str]:
    """The bias of mask ``kind`` with its drawn parameter (a window, a prefix, ...), and a label for it."""
    width = draw(st.integers(1, 48))
    simple = {"none": None, "causal": masks.causal(), "anti-causal": masks.anti_causal(),
              "trilu-causal": masks.trilu(None)}
    if kind in simple:
        return simple[kind], kind
    if kind.startswith("padding-"):
        return masks.padding(kind.removeprefix("padding-")), kind
    if kind.startswith("float-input"):
        return masks.float_input(heads if kind.endswith("head") else 1, kind.endswith("adds")), kind
    if kind == "alibi":
        base = draw(st.sampled_from([2.0, 1.5, 1.1]))
        return masks.alibi(heads, base), f"alibi(slope base {base})"
    if kind == "causal-table":
        return masks.table(masks.window_table(masks.TABLE)), kind
    if kind == "random-table":
        values = np.random.default_rng(width).standard_normal((1, heads, masks.TABLE, masks.TABLE)) * 2
        return masks.table(values, row_dependent=False), kind
    build = {"sliding-window": masks.sliding_window, "band": masks.band, "prefix-lm": masks.prefix_lm,
             "chunked": masks.chunked, "window-table": lambda w: masks.table(masks.window_table(w)),
             "trilu-window": masks.trilu}[kind]
    return build(width), f"{kind}({width})"


@st.composite
def attention_cases(draw: st.DrawFn) -> Case:
    heads = draw(st.sampled_from([1, 2, 3, 4]))
    kv_heads = draw(st.sampled_from([0, *(k for k in (1, 2) if heads % k == 0 and k < heads)]))
    h = Heads(heads, draw(st.sampled_from([2, 4, 6, 8, 16])), kv_heads=kv_heads, scale_error=draw(NEAR),
              scores=draw(st.sampled_from(sorted(SCORES))), keys=draw(st.sampled_from(sorted(KEYS))),
              leak=draw(st.sampled_from([""] * 8 + ["probs", "scores"])), biases=draw(st.booleans()),
              rotary=draw(st.booleans()), packed=draw(SELDOM))
    bias, mask_label = _bias(draw, draw(st.sampled_from(MASKS)), heads)
    return attention_case(h, bias, draw(seeds), f"{h}, mask {mask_label}")


@st.composite
def norm_cases(draw: st.DrawFn) -> Case:
    axes = st.sampled_from([(-1,), (-1,), (-1,), (2,), (1,), (-2, -1), (1, 2)])
    mean_axes = draw(axes)
    n = Norm(draw(st.integers(1, 64)), eps=draw(EPSILONS), opset=draw(st.sampled_from([14, 17, 18])),
             square=draw(st.sampled_from(["pow", "mul"])), divide=draw(st.sampled_from(["div", "recip", "rsqrt"])),
             mean_axes=mean_axes, var_axes=draw(st.sampled_from([mean_axes, mean_axes, (-1,)])),
             exponent=2.0 * draw(NEAR), bias=draw(st.booleans()), swap=draw(st.booleans()), leak=draw(SELDOM))
    kind = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    return (layernorm if kind == "layernorm" else rmsnorm)(n, draw(seeds), f"{kind} {n}")


@st.composite
def residual_cases(draw: st.DrawFn) -> Case:
    """skip-layernorm (cpu and gpu forms) and embeddings + LayerNorm."""
    if draw(st.booleans()):
        args = (draw(st.integers(1, 64)), draw(EPSILONS), draw(st.booleans()), draw(st.booleans()),
                draw(st.sampled_from(["cpu", "gpu"])))
        return skip_layernorm(*args, draw(seeds), f"skip-layernorm(hidden, eps, bias, sum used, device) {args}")
    e = Embed(draw(st.integers(1, 48)), draw(st.integers(2, 50)), positions=draw(st.sampled_from(["sliced", "range"])),
              segment=draw(st.booleans()), eps=draw(EPSILONS), order=draw(st.sampled_from(["bert", "other"])))
    return embed_layernorm(e, draw(seeds), f"embed-layernorm {e}")


@st.composite
def gelu_cases(draw: st.DrawFn) -> Case:
    g = el.Gelu(draw(st.integers(1, 64)), tanh=draw(st.booleans()),
                product=draw(st.sampled_from(sorted(GELU_PRODUCTS))), scale=draw(st.sampled_from(["div", "mul"])),
                constant_error=draw(NEAR), bias=draw(st.booleans()), leak=draw(SELDOM))
    return el.gelu(g, draw(seeds), f"gelu {g}")


@st.composite
def linear_cases(draw: st.DrawFn) -> Case:
    """matmul-add, linear-3d, conv-bn / conv-add and rotary."""
    kind = draw(st.sampled_from(["matmul-add", "linear-3d", "conv", "rotary"]))
    seed = draw(seeds)
    if kind == "matmul-add":
        k, n = draw(st.integers(1, 32)), draw(st.integers(1, 32))
        shape = draw(st.sampled_from([(n,), (1, n), (1,), (1, 1)]))
        return el.matmul_add(k, n, shape, seed, f"matmul-add k={k} n={n} bias {shape}")
    if kind == "linear-3d":
        args = (draw(st.integers(1, 32)), draw(st.integers(1, 32)), draw(st.booleans()), draw(st.booleans()))
        return el.linear_3d(*args, seed, f"linear-3d (k, n, transB, bias) {args}")
    if kind == "rotary":
        heads, size = draw(st.integers(1, 4)), 2 * draw(st.integers(1, 16))
        return el.rotary(heads, size, seed, f"rotary heads={heads} head_size={size}")
    group = draw(st.sampled_from([1, 2]))
    c = el.Conv(group * draw(st.integers(1, 4)), group * draw(st.integers(1, 4)),
                kernel=draw(st.sampled_from([1, 3, 5])), group=group, stride=draw(st.sampled_from([1, 2])),
                dilation=draw(st.sampled_from([1, 2])), conv_bias=draw(st.booleans()),
                follow=draw(st.sampled_from(["bn", "add", "badd"])), eps=draw(EPSILONS))
    return el.conv(c, seed, f"conv {c}")


FAMILIES = {"attention": attention_cases, "norm": norm_cases, "residual": residual_cases, "gelu": gelu_cases,
            "linear": linear_cases}
