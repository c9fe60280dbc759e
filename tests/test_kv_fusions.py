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

from gsrewrite.pipelines import optimize

FIXTURES = Path(__file__).parent / "fixtures" / "models"
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
VARIANTS = ("legacy14_kv", "dynamo_kv")
#: architecture -> (the ops the attention blocks become, how many of them read a cache, rotary nodes)
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
    result = optimize(str(FIXTURES / f"{stem}.onnx"))
    assert not result.dropped, result.dropped
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
    assert [s["name"] for s in result.validation.sizes] == ["decode", "prefill", "long past"]
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
