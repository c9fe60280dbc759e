"""Slow tier: every fixture export (tests/fixtures/models) through `apply --pattern all` and `optimize`.

Expected fusion counts come from the fixtures' generated MANIFEST.md (derived from the model configs); the
result must match the reference outputs of the original within 1e-4.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from gsrewrite.pipelines import ValidationOptions, apply, optimize

FIXTURES = Path(__file__).parent / "fixtures" / "models"
ATTENTION = {"MultiHeadAttention", "Attention", "GroupQueryAttention"}
NORMS = {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
         "SkipSimplifiedLayerNormalization", "RMSNormalization", "EmbedLayerNormalization"}
GELUS = {"Gelu", "FastGelu", "BiasGelu"}
#: what is not fused yet, per (architecture, family): the reason is the gap, and the test must still fail
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


def _manifest() -> dict[str, dict[str, int]]:
    expected = {}
    for line in (FIXTURES / "MANIFEST.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[1].endswith(".onnx"):
            expected[cells[1][:-5]] = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", cells[8])}
    return expected


EXPECTED = _manifest()


def _gap(stem: str, family: str, command: str) -> str | None:
    return KNOWN_GAPS.get((stem, family, command))


@pytest.mark.slow
@pytest.mark.parametrize("command", ["apply", "optimize"])
@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_fixture_export_is_fused_and_agrees(stem, command):
    expected = EXPECTED[stem]
    inputs = dict(np.load(FIXTURES / f"{stem}.inputs.npz"))
    reference = dict(np.load(FIXTURES / f"{stem}.outputs.npz"))
    run = apply if command == "apply" else optimize
    result = run(str(FIXTURES / f"{stem}.onnx"), patterns=["all"], validate=ValidationOptions(inputs=inputs))
    assert not result.dropped, result.dropped
    ops = Counter(n.op_type for n in result.model.graph.node)
    if expected.get("attention") and not _gap(stem, "attention", command):
        # the fused attention replaced the original: nothing keeps the old one alive (e.g. for a Shape read)
        assert ops["Softmax"] == 0, f"{ops['Softmax']} Softmax left next to {expected['attention']} fused"
    if command == "optimize" and stem.startswith("llama") and expected.get("attention"):
        # LLaMA has fewer KV heads than Q heads: GroupQueryAttention on the un-repeated K and V
        assert ops["GroupQueryAttention"] == expected["attention"], dict(ops)
    got = {
        "attention": sum(ops[k] for k in ATTENTION),
        "layernorm": sum(ops[k] for k in NORMS),
        "rmsnorm": sum(ops[k] for k in NORMS),
        "gelu": sum(ops[k] for k in GELUS),
        "conv_bn": expected.get("conv_bn", 0) - ops["BatchNormalization"],
        "rotary": ops["RotaryEmbedding"],
    }
    gaps = []
    for family in ("attention", "layernorm", "rmsnorm", "gelu", "conv_bn", "rotary"):
        if family not in expected:
            continue
        if _gap(stem, family, command):
            assert got[family] != expected[family], f"{family} is fused now: remove it from KNOWN_GAPS"
            gaps.append(f"{family}: {_gap(stem, family, command)}")
            continue
        assert got[family] == expected[family], f"{family}: expected {expected[family]}, fused {got[family]}"
    _assert_matches_reference(result.model, inputs, reference)
    if gaps:
        pytest.xfail("; ".join(gaps))


def _assert_matches_reference(model: onnx.ModelProto, inputs: dict, reference: dict) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs = session.run(None, {i.name: inputs[i.name] for i in session.get_inputs()})
    for meta, value in zip(session.get_outputs(), outputs, strict=True):
        assert np.max(np.abs(value - reference[meta.name])) <= 1e-4, meta.name
