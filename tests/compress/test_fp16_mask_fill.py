"""fp16 of a GroupQueryAttention decoder: the exporter's mask fill (float32's lowest) is written as fp16's largest
finite magnitude, not left to become -inf at a Cast, so a padded prompt's fully masked rows stay finite and the
next decode step does not read NaN back from the cache; what the fp16 model still gives up (the original attends
uniformly at such rows) is the unpadded-queries contract, which the compressed model states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from gsrewrite.contracts import stated
from gsrewrite.pipelines import RewriteOptions, optimize

LLAMA = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "llama.dynamo_kv.onnx"
TOKENS = 16


def _prefill_then_decode(model: bytes | str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    mask = np.ones((2, TOKENS), np.int64)
    mask[1, :5] = 0  # a left-padded row
    feeds = {"input_ids": np.random.default_rng(0).integers(0, 100, (2, TOKENS)), "attention_mask": mask,
             "position_ids": np.where(mask == 1, mask.cumsum(-1) - 1, 1)}
    pasts = [i.name for i in session.get_inputs() if i.name.startswith("past")]
    feeds.update({name: np.zeros((2, 2, 0, 8), np.float32) for name in pasts})
    names = [o.name for o in session.get_outputs()]
    prefill = dict(zip(names, session.run(None, feeds), strict=True))
    step = {"input_ids": np.array([[7], [9]]), "attention_mask": np.concatenate([mask, np.ones((2, 1), np.int64)], 1),
            "position_ids": np.array([[TOKENS], [TOKENS - 5]]),
            **{name: prefill[name.replace("past_key_values", "present")] for name in pasts}}
    return prefill, session.run(["logits"], step)[0]


def test_fp16_of_grouped_query_attention_keeps_padded_rows_finite() -> None:
    result = optimize(str(LLAMA), compress="fp16",
                      rewrite=RewriteOptions(contracts=("batch1-chunks", "unpadded-queries")))
    assert result.compressed is not None and result.compressed.ok
    assert any(n.op_type == "GroupQueryAttention" for n in result.model.graph.node)
    assert any("mask fill" in note for note in result.compressed.notes), result.compressed.notes
    assert {"batch1-chunks", "unpadded-queries"} <= set(stated(result.model))
    want_prefill, want_step = _prefill_then_decode(str(LLAMA))
    got_prefill, got_step = _prefill_then_decode(result.model.SerializeToString())
    assert not any(np.isnan(v).any() for v in got_prefill.values())
    real = np.concatenate([got_prefill["logits"][0] - want_prefill["logits"][0],
                           got_prefill["logits"][1, 5:] - want_prefill["logits"][1, 5:]])
    assert np.abs(real).max() < 1e-2  # fp16 rounding at every real token
    assert not np.isnan(got_step).any() and np.abs(got_step - want_step).max() < 1e-2
