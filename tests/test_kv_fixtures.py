"""The KV-cache decoder fixtures (tests/fixtures/models/*_kv.onnx, made by tests/fixtures/make_kv_models.py).

In the project's onnxruntime: the committed decode-step and prefill inputs reproduce the committed outputs; inputs
built from the graph's own dim_params (a prefill, a long past, another batch) give outputs of the shapes the graph
declares; and a decode step on the presents of a prefill continues that prefill (the cache works).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "models"
STEMS = sorted(p.name.removesuffix(".onnx") for p in FIXTURES.glob("*_kv.onnx"))
ATOL = 1e-4


@functools.cache
def _session(stem: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(FIXTURES / f"{stem}.onnx"), options, providers=["CPUExecutionProvider"])


def _run(stem: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = _session(stem)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _size(dim: int | str, sizes: dict[str, int]) -> int:
    """A dimension of the graph: a number, an axis name, or a sum of axis names (in either order)."""
    if isinstance(dim, int):
        return dim
    terms = [t.strip() for t in dim.split("+")]
    assert all(t in sizes for t in terms), f"dim_param {dim!r}: not made of {sorted(sizes)}"
    return sum(sizes[t] for t in terms)


def _inputs(stem: str, batch: int, seq: int, past: int, seed: int = 0,
            ids: np.ndarray | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """Inputs built from the graph's dim_params: random tokens (or ``ids``), all-ones mask, positions
    ``past .. past + seq - 1``, N(0, 1) past keys/values (the same encoder K/V for every ``seed``)."""
    sizes = {"batch": batch, "sequence": seq, "past_sequence": past, "encoder_sequence": 11}
    rng = np.random.default_rng(seed)
    encoder_rng = np.random.default_rng(1234)
    vocab = _session(stem).get_outputs()[0].shape[-1]
    feeds = {}
    for value in _session(stem).get_inputs():
        shape = [_size(d, sizes) for d in value.shape]
        if value.name == "input_ids":
            feeds[value.name] = rng.integers(0, vocab, shape, dtype=np.int64) if ids is None else ids
        elif value.name == "attention_mask":
            feeds[value.name] = np.ones(shape, np.int64)
        elif value.name == "position_ids":
            feeds[value.name] = np.broadcast_to(np.arange(past, past + seq, dtype=np.int64), shape).copy()
        else:
            source = encoder_rng if "encoder" in value.name else rng
            feeds[value.name] = source.standard_normal(shape, dtype=np.float32)
    return feeds


def test_the_kv_fixtures_are_all_there():
    expected = [
        f"{arch}.{variant}" for arch in ("gpt2", "llama", "whisper") for variant in ("dynamo_kv", "legacy14_kv")
    ]
    assert expected == STEMS
    manifest = (FIXTURES / "MANIFEST.kv.md").read_text()
    assert all(f"| {stem}.onnx |" in manifest for stem in STEMS)


@pytest.mark.parametrize("tag", ["", ".prefill"])
@pytest.mark.parametrize("stem", STEMS)
def test_committed_inputs_reproduce_committed_outputs(stem, tag):
    feeds = dict(np.load(FIXTURES / f"{stem}{tag}.inputs.npz"))
    reference = dict(np.load(FIXTURES / f"{stem}{tag}.outputs.npz"))
    past = next(v.shape[2] for k, v in feeds.items() if re.fullmatch(r"past_key_values\.0(\.decoder)?\.key", k))
    # the decode step is one new token after a cache; the prefill several tokens and an empty cache
    assert (feeds["input_ids"].shape[1], past > 0) == ((1, True) if tag == "" else (6, False))
    outputs = _run(stem, feeds)
    assert sorted(outputs) == sorted(reference)
    for name, value in reference.items():
        assert outputs[name].shape == value.shape, name
        np.testing.assert_allclose(outputs[name], value, rtol=0, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("shape", [(1, 5, 0), (1, 1, 100), (3, 2, 9)], ids=["prefill", "long-past", "batch3"])
@pytest.mark.parametrize("stem", STEMS)
def test_inputs_from_the_graph_dims_run_and_outputs_have_the_declared_dims(stem, shape):
    batch, seq, past = shape
    outputs = _run(stem, _inputs(stem, batch, seq, past))
    sizes = {"batch": batch, "sequence": seq, "past_sequence": past}
    for value in _session(stem).get_outputs():
        assert list(outputs[value.name].shape) == [_size(d, sizes) for d in value.shape], value.name
        assert np.isfinite(outputs[value.name]).all(), value.name
    present = [n for n in outputs if n.startswith("present.")]
    assert present and all(outputs[n].shape[2] == past + seq for n in present)


@pytest.mark.parametrize("stem", STEMS)
def test_a_decode_step_on_the_presents_of_a_prefill_continues_it(stem):
    tokens = _inputs(stem, 2, 7, 0, seed=5)["input_ids"]
    whole = _run(stem, _inputs(stem, 2, 7, 0, ids=tokens))
    prefill = _run(stem, _inputs(stem, 2, 6, 0, ids=tokens[:, :6]))
    step = _inputs(stem, 2, 1, 6, ids=tokens[:, 6:])
    for name in [n for n in step if n.startswith("past_key_values.") and ".encoder." not in n]:
        step[name] = prefill[name.replace("past_key_values.", "present.")]
    decoded = _run(stem, step)
    np.testing.assert_allclose(decoded["logits"][:, 0], whole["logits"][:, 6], rtol=0, atol=ATOL)
    for name in [n for n in decoded if n.startswith("present.")]:
        np.testing.assert_allclose(decoded[name], whole[name], rtol=0, atol=ATOL, err_msg=name)
