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


sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import real  # noqa: E402  (SmolLM2-135M layer 0: head size 64, which GroupQueryAttention's own rotary needs)

FAST = ("batch1-chunks", "unpadded-prompts")


@pytest.mark.parametrize("flavor", ["dynamo_kv", "legacy14_kv"])
def test_rotary_and_projections_move_into_group_query_attention_on_real_weights(flavor: str, tmp_path: Path) -> None:
    """With both contracts the real decoder's attention is one packed QKV MatMul into GroupQueryAttention rotating
    Q and K itself (no RotaryEmbedding, no transposes); the model's own prefill and decode agree with the original;
    without unpadded-prompts RotaryEmbedding stays, on the projections."""
    path = real.load_real_decoder(tmp_path, flavor)
    result = optimize(str(path), rewrite=RewriteOptions(contracts=FAST))
    assert not result.dropped and result.contracts == list(FAST), result.dropped
    assert {k: result.counts.get(k) for k in ("gqa-past", "gqa-rotary", "gqa-packing")} == dict.fromkeys(
        ("gqa-past", "gqa-rotary", "gqa-packing"), 1), dict(result.counts)
    ops = Counter(n.op_type for n in result.model.graph.node)
    assert ops["RotaryEmbedding"] == 0 and ops["Transpose"] == 0 and ops["GroupQueryAttention"] == 1, dict(ops)
    fused = result.model.SerializeToString()
    for feeds in (real.prefill_feeds("france"), real.decode_feeds(path, past=16)):
        want, got = real.run(path, feeds), real.run(fused, feeds)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, atol=1e-4, rtol=1e-3, err_msg=f"{flavor} {name}")
    chunks = optimize(str(path), rewrite=RewriteOptions(contracts=FAST[:1]))
    assert chunks.counts.get("gqa-rotary-3d") == 1 and not chunks.counts.get("gqa-rotary")
    assert Counter(n.op_type for n in chunks.model.graph.node)["Transpose"] == 0


def test_a_padded_batched_prompt_is_what_unpadded_prompts_gives_up(tmp_path: Path) -> None:
    """The contract is needed: a left-padded prompt at batch 2 (positions counting the visible tokens, as generate
    makes them) is rotated by the first row's positions once GroupQueryAttention rotates. Its logits still agree
    (rotary scores depend on position differences only, and the shift is the same for every real token), but the
    present keys differ at the real tokens: the next steps, at the model's own positions, read a wrong cache. At
    batch 1 the same row agrees."""
    path = real.load_real_decoder(tmp_path)
    fused = optimize(str(path), rewrite=RewriteOptions(contracts=FAST), validate=False).model.SerializeToString()
    ids = real.prompt_ids("france")[:, :12]
    mask = np.ones((2, 12), np.int64)
    mask[1, :3] = 0
    positions = np.where(mask == 1, mask.cumsum(-1) - 1, 1)
    feeds = {"input_ids": np.repeat(ids, 2, 0), "attention_mask": mask, "position_ids": positions,
             **real.empty_past(2)}
    want, got = real.run(path, feeds), real.run(fused, feeds)
    np.testing.assert_allclose(got["logits"][:, 3:], want["logits"][:, 3:], atol=1e-3, rtol=1e-3)
    key = "present.0.key"
    assert np.abs(got[key][1, :, 3:] - want[key][1, :, 3:]).max() > 1e-1  # the padded row's real tokens
    np.testing.assert_allclose(got[key][0], want[key][0], atol=1e-4, rtol=1e-3)
    single = {k: v[1:] for k, v in feeds.items()}  # the same padded row alone: batch 1 keeps any positions
    np.testing.assert_allclose(real.run(fused, single)[key][0, :, 3:], real.run(path, single)[key][0, :, 3:],
                               atol=1e-4, rtol=1e-3)


def test_compression_after_contracted_fusions_is_validated_on_the_contracts_inputs(tmp_path: Path) -> None:
    """optimize --contract ... --compress int4: the compression's validation tries the inputs the contracts keep,
    as the fusions' did (it ran the chunk set at batch 2, which GroupQueryAttention refuses)."""
    path = real.load_real_decoder(tmp_path)
    result = optimize(str(path), rewrite=RewriteOptions(contracts=FAST), compress="int4")
    assert result.contracts == list(FAST) and result.compressed is not None
    ops = Counter(n.op_type for n in result.model.graph.node)
    assert ops["GroupQueryAttention"] == 1 and ops["MatMulNBits"] >= 1, dict(ops)
