"""Opt-in tier (GSREWRITE_REAL_MODELS=1): the real-weight models of benchmarks/make_real_models.py through the
installed script — SmolLM2-135M-Instruct keeps every fusion and its greedy tokens, MiniLM keeps its fusions.

The models are made on this machine (hundreds of MB, not in git): `python benchmarks/make_real_models.py` with
torch and transformers (see benchmarks/results/real_models.md); GSREWRITE_REAL_DIR points elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

pytestmark = [pytest.mark.opt_in("GSREWRITE_REAL_MODELS"), pytest.mark.slow]

REAL = Path(os.environ.get("GSREWRITE_REAL_DIR", Path(__file__).resolve().parent.parent / "benchmarks/_work/real"))
GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _need(name: str) -> Path:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"{path} is missing: run benchmarks/make_real_models.py first")
    return path


def _optimize(model: Path, out: Path, *extra: str) -> dict:
    done = subprocess.run([str(GSREWRITE), "optimize", str(model), str(out), "--json", *extra], capture_output=True,
                          text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _greedy(path: Path, prompt: dict[str, np.ndarray], steps: int) -> list[int]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    feed, tokens = dict(prompt), []
    for _ in range(steps):
        outs = dict(zip(names, session.run(names, feed), strict=True))
        token = int(outs["logits"][0, -1].argmax())
        tokens.append(token)
        total = feed["attention_mask"].shape[1] + 1
        feed = {"input_ids": np.array([[token]], np.int64), "attention_mask": np.ones((1, total), np.int64),
                "position_ids": np.array([[total - 1]], np.int64),
                **{k.replace("present.", "past_key_values."): v for k, v in outs.items() if k.startswith("present.")}}
    return tokens


def test_smollm2_keeps_every_fusion_and_its_greedy_tokens(tmp_path: Path) -> None:
    model = _need("smollm2.dynamo_kv.onnx")
    result = _optimize(model, tmp_path / "fused.onnx")
    assert not result["dropped"] and result["validation"]["ok"], result["dropped"]
    assert result["counts"]["rmsnorm"] == 61 and result["counts"]["rotary-positions"] == 60
    assert result["counts"]["mha-4d"] == 30
    for prompt in ("france", "haiku", "spider"):
        feed = dict(np.load(_need(f"smollm2.kv.{prompt}.prefill.inputs.npz")))
        assert _greedy(tmp_path / "fused.onnx", feed, 20) == _greedy(model, feed, 20), prompt


def test_smollm2_with_grouped_query_attention_states_its_contract(tmp_path: Path) -> None:
    result = _optimize(_need("smollm2.dynamo_kv.onnx"), tmp_path / "gqa.onnx", "--contract", "batch1-chunks")
    assert result["counts"]["gqa-past"] == 30 and not result["dropped"]
    assert list(result["contracts"]) == ["batch1-chunks"]


@pytest.mark.parametrize("variant", ["legacy14", "dynamo"])
def test_minilm_keeps_its_fusions(tmp_path: Path, variant: str) -> None:
    result = _optimize(_need(f"minilm.{variant}.onnx"), tmp_path / "minilm.onnx")
    assert not result["dropped"] and result["validation"]["ok"], result["dropped"]
    assert sum(result["counts"].values()) >= 6 * 2  # attention and norms of six layers at least
