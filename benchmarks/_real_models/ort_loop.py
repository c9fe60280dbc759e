"""onnxruntime-only helpers for KV-cache decoders: feeds by input name, prefill, greedy decoding, the noise figure.

A decoder here has optimum's / onnxruntime-genai's names: ``input_ids``, ``attention_mask`` (the whole length,
past + new), optionally ``position_ids``, ``past_key_values.N.key`` / ``.value`` ``[batch, kv_heads, past,
head_size]``; outputs ``logits`` and ``present.N.key`` / ``.value``.  Every feed is built from the session's own
input list, by name, so the same loop drives the torch exports and the onnxruntime-genai builder's models.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import onnxruntime as ort

log = logging.getLogger(__name__)

PAST = "past_key_values."
LEVELS = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}

Past = dict[str, np.ndarray]


def session(path: Path | str | bytes, level: str = "disable", threads: int = 0) -> ort.InferenceSession:
    """A CPU session with ``level`` (``disable`` = ORT_DISABLE_ALL, ``all`` = ORT_ENABLE_ALL)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(path if isinstance(path, bytes) else str(path), so, providers=["CPUExecutionProvider"])


def run(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{output name: array}."""
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def genai_head_size(path: Path | str | bytes) -> int | None:
    """The head size of an onnxruntime-genai builder's model (its past inputs leave it symbolic: ``kv_cache_dim``),
    from the ``genai_config.json`` beside it; None for other models."""
    config = Path(path).parent / "genai_config.json" if not isinstance(path, bytes) else None
    if config is None or not config.exists():
        return None
    return int(json.loads(config.read_text())["model"]["decoder"]["head_size"])


def empty_past(sess: ort.InferenceSession, batch: int = 1, head_size: int | None = None) -> Past:
    """Zero-length past tensors for every ``past_key_values.*`` input (shape and dtype from the session; a
    symbolic head size from ``head_size``)."""
    past = {}
    for i in sess.get_inputs():
        if i.name.startswith(PAST):
            _, heads, _, size = i.shape
            size = size if isinstance(size, int) else head_size
            if not (isinstance(heads, int) and isinstance(size, int)):
                raise ValueError(f"{i.name}: KV heads / head size not fixed in {i.shape}")
            past[i.name] = np.zeros((batch, heads, 0, size), DTYPES[i.type])
    return past


def step_feeds(sess: ort.InferenceSession, ids: np.ndarray, past: Past) -> dict[str, np.ndarray]:
    """The feeds of one step: ``ids`` [batch, sequence] after the cached ``past`` (nothing padded)."""
    batch, seq = ids.shape
    past_len = next(iter(past.values())).shape[2] if past else 0
    feeds: dict[str, np.ndarray] = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = ids.astype(np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((batch, past_len + seq), np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.broadcast_to(np.arange(past_len, past_len + seq, dtype=np.int64), (batch, seq)).copy()
        elif i.name.startswith(PAST):
            feeds[i.name] = past[i.name]
        else:
            raise ValueError(f"unexpected decoder input {i.name!r}")
    return feeds


def presents_as_past(outs: dict[str, np.ndarray]) -> Past:
    """``present.N.key`` -> ``past_key_values.N.key``."""
    return {re.sub(r"^present\.", PAST, k): v for k, v in outs.items() if k.startswith("present.")}


def step(sess: ort.InferenceSession, ids: np.ndarray, past: Past) -> tuple[np.ndarray, Past]:
    """(logits, the new past) after feeding ``ids``."""
    outs = run(sess, step_feeds(sess, ids, past))
    return outs["logits"], presents_as_past(outs)


def greedy(sess: ort.InferenceSession, prompt: list[int], max_new: int, eos: set[int],
           head_size: int | None = None) -> list[int]:  # fmt: skip
    """Greedy decoding: a prefill of ``prompt``, then one token per step; the new tokens (eos included)."""
    logits, past = step(sess, np.array([prompt], np.int64), empty_past(sess, head_size=head_size))
    new: list[int] = []
    while len(new) < max_new:
        token = int(np.argmax(logits[0, -1]))
        new.append(token)
        if token in eos:
            break
        logits, past = step(sess, np.array([[token]], np.int64), past)
    return new


def decode_noise(path: Path | str | bytes, ids: list[int], past_lens: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """The model's own noise: ORT_ENABLE_ALL vs ORT_DISABLE_ALL at a decode step after a real prefill.

    For each ``past`` in ``past_lens``: the first ``past`` tokens of ``ids`` are prefilled (ORT_DISABLE_ALL), the
    next token of ``ids`` is fed with that past to both sessions; returns {past: {"max_abs": max |logits
    difference|, "logits_max_abs": max |logits|, "logits_std": std of the logits, "top1_agree": 1.0 if both pick
    the same token}}.
    """
    plain, full = session(path, "disable"), session(path, "all")
    out: dict[int, dict[str, float]] = {}
    for n in past_lens:
        if len(ids) <= n:
            raise ValueError(f"{len(ids)} tokens: not enough for a past of {n} plus one")
        _, past = step(plain, np.array([ids[:n]], np.int64), empty_past(plain, head_size=genai_head_size(path)))
        nxt = np.array([[ids[n]]], np.int64)
        a, _ = step(plain, nxt, past)
        b, _ = step(full, nxt, past)
        out[n] = {
            "max_abs": float(np.max(np.abs(a.astype(np.float64) - b))),
            "logits_max_abs": float(np.max(np.abs(a))),
            "logits_std": float(np.std(a)),
            "top1_agree": float(np.argmax(a[0, -1]) == np.argmax(b[0, -1])),
        }
        log.info("noise at past %d: max |ENABLE_ALL - DISABLE_ALL| = %.3g (|logits| <= %.1f)", n,
                 out[n]["max_abs"], out[n]["logits_max_abs"])  # fmt: skip
    return out


def encoder_noise(path: Path | str | bytes, feeds: dict[str, np.ndarray]) -> dict[str, float]:
    """ORT_ENABLE_ALL vs ORT_DISABLE_ALL on an encoder: max |difference| per output, and each output's max |value|."""
    a = run(session(path, "disable"), feeds)
    b = run(session(path, "all"), feeds)
    out = {}
    for k in a:
        out[f"{k}.max_abs"] = float(np.max(np.abs(a[k].astype(np.float64) - b[k])))
        out[f"{k}.value_max_abs"] = float(np.max(np.abs(a[k])))
    return out
