"""Cases every run tries first (``hypothesis.example``), per family: the shapes of bugs found so far, so that
the short tier checks them whatever the random draws are.

* the adversary's case: a sliding-window causal mask (window 20) that is the plain causal mask up to
  sequence 20, in three exporter spellings, plus chunked attention over blocks of 20;
* grouped-query attention with a head size that is not a multiple of 8 (onnxruntime's CPU
  GroupQueryAttention refuses it: found by this fuzzer, shrunk to 2 query heads of size 2 over 1 KV head);
* a near-miss LayerNorm whose original outputs NaN (Pow of a negative base with exponent 2.0002): NaN where
  the original has NaN agrees.
"""

from __future__ import annotations

from collections.abc import Callable

from . import masks
from .attention import Heads, attention_case
from .cases import Case
from .norms import Norm, layernorm


def _attention() -> list[Case]:
    window = {"sliding-window(20)": masks.sliding_window(20), "window-table(20)": masks.table(masks.window_table(20)),
              "trilu-window(20)": masks.trilu(20), "chunked(20)": masks.chunked(20)}
    cases = [attention_case(Heads(2, 8), bias, 0, f"pinned: mha, mask {name}") for name, bias in window.items()]
    cases.append(attention_case(Heads(2, 8, rotary=True), masks.sliding_window(20), 0,
                                "pinned: mha-4d after rotary, mask sliding-window(20)"))
    cases.append(attention_case(Heads(2, 2, kv_heads=1), None, 0, "pinned: gqa, head size 2, no mask"))
    return cases


def _norm() -> list[Case]:
    n = Norm(hidden=2, eps=1e-12, opset=18, exponent=2.0002, bias=False)
    return [layernorm(n, 0, f"pinned: layernorm whose original is NaN {n}")]


PINNED: dict[str, Callable[[], list[Case]]] = {"attention": _attention, "norm": _norm}


def pinned(family: str) -> list[Case]:
    """The pinned cases of ``family`` (none for most)."""
    build = PINNED.get(family)
    return build() if build is not None else []
