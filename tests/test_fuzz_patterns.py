"""Property-based fuzzing of every fusion family at sizes validation does not use (tests/fuzz/).

Each example is a generated model (random hidden sizes, head counts, epsilons, exporter spellings, attention
masks and score biases, near-miss constants, intermediates with outside consumers, a dynamic batch and
sequence). It goes through ``gsrewrite.apply(model, patterns=["all"])`` (or ``gsrewrite.optimize``); then
the original and the result run in onnxruntime (optimizations off) at batch 1 and 3 and sequences 5 to 150,
with the attention mask padded left, right or not at all. They must agree within 1e-3 (relative above 1),
unless nothing was rewritten.

Two tiers:

* the short tier (always): the pinned cases of tests/fuzz/pinned.py (known bugs, at every size), then 20
  examples per family, derandomized, a few seconds in all;
* the slow tier (``@pytest.mark.slow``, as tests/test_real_exports.py): 250 examples per family (1,250 in
  all; ``GSREWRITE_FUZZ_EXAMPLES=N`` sets the number per family), every size. It runs when selected with
  ``-m slow`` or with ``GSREWRITE_FUZZ_SLOW=1`` in the environment, and is not even collected otherwise (an
  ``opt_in`` tier, tests/conftest.py: a plain ``pytest`` run stays short, although CI selects no marker).

Compressed models (tests/fuzz/compression.py) are compared with the comparison compression itself uses (NaN/inf
patterns, cosine, label agreement, top-1 of class scores), on fresh rows: 12 examples in the short tier, the
slow tier's number in the slow one.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from fuzz.cases import PADDINGS, Case
from fuzz.compression import CompressionCase, check_compression, compression_cases
from fuzz.pinned import pinned
from fuzz.runner import SIZES, check
from fuzz.strategies import FAMILIES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

SHORT = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(SHORT, max_examples=int(os.environ.get("GSREWRITE_FUZZ_EXAMPLES", "250")))
commands = st.sampled_from(["apply", "apply", "apply", "optimize"])


def _property(family: str, sizes: st.SearchStrategy, every_size: list[tuple[int, int]]) -> Callable[[], None]:
    """The property for ``family``: its pinned cases (tests/fuzz/pinned.py) at ``every_size``, then draws."""
    @given(case=FAMILIES[family](), sizes=sizes, command=commands, seed=st.integers(0, 1000))
    def prop(case: Case, sizes: list[tuple[int, int]], command: str, seed: int) -> None:
        check(case, sizes, PADDINGS, command, seed)

    for case in pinned(family):
        prop = example(case=case, sizes=every_size, command="apply", seed=0)(prop)
    return prop


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rewrites_agree_at_unvalidated_sizes(family: str) -> None:
    two_sizes = st.lists(st.sampled_from(SIZES), min_size=2, max_size=2, unique=True)
    SHORT(_property(family, two_sizes, list(SIZES)))()


@pytest.mark.slow
@pytest.mark.opt_in("GSREWRITE_FUZZ_SLOW")  # collected only with -m slow or GSREWRITE_FUZZ_SLOW=1 (conftest)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rewrites_agree_at_every_size_slow_tier(family: str) -> None:
    SLOW(_property(family, st.just(list(SIZES)), list(SIZES)))()


COMPRESS_SHORT = settings(SHORT, max_examples=12)


@given(case=compression_cases())
def _compression_property(case: CompressionCase) -> None:
    check_compression(case)


def test_compressed_models_agree_by_the_new_metric() -> None:
    COMPRESS_SHORT(_compression_property)()


@pytest.mark.slow
@pytest.mark.opt_in("GSREWRITE_FUZZ_SLOW")
def test_compressed_models_agree_by_the_new_metric_slow_tier() -> None:
    SLOW(_compression_property)()


def test_the_checker_catches_a_wrong_rewrite() -> None:
    """The safety net itself: a rewrite that is right at validation's sizes only is reported, with where."""
    import numpy as np
    from fuzz import masks
    from fuzz.attention import Heads, attention_case
    from fuzz.runner import compare, session

    window = attention_case(Heads(2, 4), masks.sliding_window(20), 0, "window 20")
    causal = attention_case(Heads(2, 4), masks.causal(), 0, "causal")
    original, wrong = session(window.model), session(causal.model)
    assert compare(window, original, wrong, 2, 16, "none", 0) is None  # validation's size cannot tell
    mismatch = compare(window, original, wrong, 1, 41, "right", 0)
    assert mismatch is not None and mismatch.seq == 41 and mismatch.max_abs > 1e-3
    assert np.isfinite(mismatch.max_excess)
