"""The held-out families of issue 33 item 6 (tests/fixtures/models/heldout, made by make_heldout_models.py) through
the installed ``gsrewrite optimize``: exit 0, validated, and the attention blocks fused as their structure calls
for (multi-query Falcon, T5's encoder-decoder without a cycle)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

HELDOUT = Path(__file__).parent / "fixtures" / "models" / "heldout"
GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def optimize(stem: str, out: Path, *options: str) -> tuple[dict, Counter]:
    """``gsrewrite optimize --json`` on the fixture: its JSON report and the result's op counts."""
    run = subprocess.run([str(GSREWRITE), "optimize", str(HELDOUT / f"{stem}.onnx"), "-o", str(out), "--json",
                          *options], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["validation"]["ok"], report["validation"]
    return report, Counter(n.op_type for n in onnx.load(str(out)).graph.node)


@pytest.mark.parametrize("variant", ["legacy14_dyn", "dynamo_dyn", "legacy14_kv", "dynamo_kv"])
def test_falcon_multi_query_attention_is_fused(variant: str, tmp_path: Path) -> None:
    report, ops = optimize(f"falcon.{variant}", tmp_path / "out.onnx")
    assert report["counts"].get("mqa-4d") == 2, report["counts"]
    assert not report["dropped"], report["dropped"]
    assert ops["MultiHeadAttention"] == 2 and ops["Softmax"] == 0


def test_t5_encoder_decoder_legacy14_is_fused_without_a_cycle(tmp_path: Path) -> None:
    _report, ops = optimize("t5.legacy14_dyn", tmp_path / "out.onnx")
    assert ops["Softmax"] == 0  # 2 encoder, 2 decoder self-, 2 cross-attention blocks
    assert ops["Attention"] + ops["MultiHeadAttention"] == 6, ops


@pytest.mark.parametrize("variant", ["legacy14_kv", "dynamo_kv"])
def test_gemma2_soft_capped_attention_is_fused_under_the_contract(variant: str, tmp_path: Path) -> None:
    report, ops = optimize(f"gemma2.{variant}", tmp_path / "out.onnx", "--contract", "batch1-chunks")
    assert report["counts"].get("gqa-past-softcap") == 2, report["counts"]
    assert ops["GroupQueryAttention"] == 2 and ops["Tanh"] == 1  # the final logit soft-cap stays
    report, ops = optimize(f"gemma2.{variant}", tmp_path / "plain.onnx")  # MultiHeadAttention has no softcap
    assert ops["Softmax"] == 2 and "--contract batch1-chunks" in report["skipped"]["gqa-past-softcap"]


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("variant", ["legacy14_kv", "dynamo_kv"])
def test_a_sliding_window_is_never_fused_as_a_plain_causal_mask(variant: str, tmp_path: Path) -> None:
    # Mistral's window of 4 keys stays in the additive bias: MultiHeadAttention without the contract,
    # GroupQueryAttention (causal 0, the bias as attention_bias) with it; never unidirectional / causal alone
    _, ops = optimize(f"mistral.{variant}", tmp_path / "plain.onnx")
    assert ops["MultiHeadAttention"] == 2 and ops["Softmax"] == 0
    for node in onnx.load(str(tmp_path / "plain.onnx")).graph.node:
        if node.op_type == "MultiHeadAttention":
            assert not _attrs(node).get("unidirectional") and len(node.input) > 5 and node.input[5]
    _, ops = optimize(f"mistral.{variant}", tmp_path / "gqa.onnx", "--contract", "batch1-chunks")
    assert ops["GroupQueryAttention"] == 2
    for node in onnx.load(str(tmp_path / "gqa.onnx")).graph.node:
        if node.op_type == "GroupQueryAttention":
            assert _attrs(node).get("causal", 0) == 0 and len(node.input) > 10 and node.input[10]


@pytest.mark.parametrize("variant", ["legacy14_kv", "dynamo_kv"])
def test_mistrals_window_is_group_query_attentions_local_window_under_both_contracts(variant: str,
                                                                                     tmp_path: Path) -> None:
    # with unpadded-queries too, the window of 4 keys becomes the op's local_window_size (the bias keeps the
    # padding); validated at decode / prefill / chunk / long past (256 keys, far past the window)
    out = tmp_path / "window.onnx"
    report, _ = optimize(f"mistral.{variant}", out, "--contract", "batch1-chunks", "--contract", "unpadded-queries")
    assert report["counts"].get("gqa-past-window") == 2 and not report["dropped"], report
    assert [s["name"] for s in report["validation"]["sizes"]] == ["decode", "prefill", "chunk", "long past"]
    assert sorted(report["contracts"]) == ["batch1-chunks", "unpadded-queries"]
    model = onnx.load(str(out))
    for node in model.graph.node:
        if node.op_type == "GroupQueryAttention":
            attrs = _attrs(node)
            assert attrs["causal"] == 1 and attrs["local_window_size"] == 4 and node.input[10]
    assert "unpadded-queries: every new token" in {p.key: p.value for p in model.metadata_props}["gsrewrite.contracts"]
    # the committed decode step (a left-padded past, the new token visible) reproduced; the committed prefill's
    # right-padded row is outside the contract: its real tokens agree (its padded queries still have real keys in
    # their windows, so they agree too; a left-padded one would not: tests/patterns/test_window.py)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    for stem in (f"mistral.{variant}", f"mistral.{variant}.prefill"):
        feed = dict(np.load(HELDOUT / f"{stem}.inputs.npz"))
        got = dict(zip(names, session.run(None, feed), strict=True))
        want = np.load(HELDOUT / f"{stem}.outputs.npz")["logits"]
        visible = feed["attention_mask"][:, -want.shape[1]:].astype(bool)
        assert np.abs(got["logits"] - want)[visible].max() < 1e-4
