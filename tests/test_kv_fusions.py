"""Decoders with a KV cache (tests/fixtures/models/*_kv, both exporters): every attention block fused as the op
its structure calls for, with the cache inside the op, rotary fused, validated at a decode step, a prefill and
a long past; the committed decode and prefill references reproduced."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gsrewrite.contracts import METADATA_KEY
from gsrewrite.pipelines import RewriteOptions, optimize

FIXTURES = Path(__file__).parent / "fixtures" / "models"
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
VARIANTS = ("legacy14_kv", "dynamo_kv")
#: architecture -> (the ops the attention blocks become, how many of them read a cache, rotary nodes); LLaMA's
#: GroupQueryAttention with the contract it narrows the model to (batch1-chunks), asked for
CONTRACTS = {"llama": ("batch1-chunks",)}
EXPECTED = {
    "gpt2": ({"MultiHeadAttention": 4}, 4, 0),
    "llama": ({"GroupQueryAttention": 4}, 4, 8),
    "whisper": ({"MultiHeadAttention": 4}, 2, 0),  # 2 self-attention with a cache, 2 cross-attention
}


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feed), strict=True))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_kv_cache_attention_is_fused_with_its_cache(arch: str, variant: str) -> None:
    stem = f"{arch}.{variant}"
    result = optimize(str(FIXTURES / f"{stem}.onnx"), rewrite=RewriteOptions(contracts=CONTRACTS.get(arch, ())))
    assert not result.dropped, result.dropped
    assert result.contracts == list(CONTRACTS.get(arch, ()))
    ops = Counter(n.op_type for n in result.model.graph.node)
    attention, cached, rotary = EXPECTED[arch]
    assert {op: ops[op] for op in attention} == attention, dict(ops)
    assert ops["Softmax"] == 0 and ops["RotaryEmbedding"] == rotary, dict(ops)
    # the cache lives inside the fused op: every present output is one of its outputs
    producers = {o: n.op_type for n in result.model.graph.node for o in n.output}
    presents = [o.name for o in result.model.graph.output if o.name.startswith("present")]
    assert len(presents) == 2 * cached
    assert all(producers[name] in attention for name in presents), {p: producers[p] for p in presents}
    # a decode step, a prefill and a long past (shorter than 256 where a position table ends first: Whisper's 128)
    assert [s["name"] for s in result.validation.sizes] == ["decode", "prefill", "chunk", "long past"]
    for inputs in ("inputs", "prefill.inputs"):
        feed = dict(np.load(FIXTURES / f"{stem}.{inputs}.npz"))
        reference = dict(np.load(FIXTURES / f"{stem}.{inputs.replace('inputs', 'outputs')}.npz"))
        got = _run(result.model, {k: v for k, v in feed.items()
                                  if k in {i.name for i in result.model.graph.input}})
        for name, expected in reference.items():
            np.testing.assert_allclose(got[name], expected, atol=1e-4, err_msg=f"{stem} {inputs} {name}")


def test_the_installed_cli_fuses_a_grouped_query_decoder_to_its_onnx_target(tmp_path: Path) -> None:
    out = tmp_path / "llama.onnx"
    result = subprocess.run([str(GSREWRITE), "optimize", str(FIXTURES / "llama.dynamo_kv.onnx"), str(out),
                             "--target", "onnx", "--opset", "23"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    ops = Counter(n.op_type for n in onnx.load(out).graph.node)
    assert ops["Attention"] == 4 and not any(n.domain for n in onnx.load(out).graph.node), dict(ops)


@pytest.mark.parametrize("variant", VARIANTS)
def test_grouped_query_attention_narrows_the_model_only_when_asked(variant: str) -> None:
    """onnxruntime's GroupQueryAttention refuses several new tokens over a past at batch > 1, which the original
    runs: by default LLaMA's attention becomes MultiHeadAttention over the repeated cache (every input still
    runs), with the reason GroupQueryAttention was skipped; asked for, the contract is in the result and model."""
    default = optimize(str(FIXTURES / f"llama.{variant}.onnx"))
    ops = Counter(n.op_type for n in default.model.graph.node)
    assert ops["GroupQueryAttention"] == 0 and ops["MultiHeadAttention"] == 4, dict(ops)
    assert "batch1-chunks" in default.skipped["gqa-past"] and not default.contracts
    assert not any(p.key == METADATA_KEY for p in default.model.metadata_props)
    chunk = next(s for s in default.validation.sizes if s["name"] == "chunk")
    assert chunk["shapes"]["input_ids"] == [2, 4]  # several new tokens over a past, at batch 2
    narrowed = optimize(str(FIXTURES / f"llama.{variant}.onnx"), rewrite=RewriteOptions(contracts=["batch1-chunks"]))
    assert narrowed.contracts == ["batch1-chunks"] and narrowed.counts.get("gqa-past") == 4
    stated = {p.key: p.value for p in narrowed.model.metadata_props}
    assert stated[METADATA_KEY].startswith("batch1-chunks: several new tokens over a non-empty past only at batch 1")
    chunk = next(s for s in narrowed.validation.sizes if s["name"] == "chunk")
    assert chunk["shapes"]["input_ids"] == [1, 4]  # the contract's inputs only
