"""compress's latency judgement (issue 33 item 5): a decoder is timed where it is used (a decode step, and a
prefill), a result is refused as slower only beyond the measurement's own noise, and an int4 result's MatMulNBits
accuracy_level is the faster of 0 and 4. Timings here come from a fake timer: no test asserts a wall time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.errors import SlowerModelError
from gsrewrite.pipelines import bench as bench_module
from gsrewrite.pipelines import compress as compress_module
from gsrewrite.pipelines.bench import BenchResult, Timing
from gsrewrite.pipelines.compress import PhaseTimes, slower_beyond_noise
from gsrewrite.validation import phases as phases_module

LLAMA_KV = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "llama.dynamo_kv.onnx"
RELAXED = {"min_cosine": 0.5, "min_top1": 0.0, "min_agreement": 0.0}


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((64, 128)) * 0.1).astype(np.float32), \
        (rng.standard_normal((128, 64)) * 0.1).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="down")], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("before", "after", "slower"), [
    # a quiet machine, a real slowdown: every measurement of the result is 1.3x the original's
    ([[10.0, 10.1, 10.3], [10.05, 10.2]], [[13.0, 13.2], [13.1, 13.3]], True),
    # issue 33: the 2.3 GB decoder on a busy machine, its best run moving 18% between two blocks: within the noise
    ([[300.0, 320.0], [355.0, 360.0]], [[406.0, 410.0], [320.0, 330.0]], False),
    # fp16 on RoBERTa at 1.32x while the original's own best moved 30%: within the noise
    ([[10.0], [13.0]], [[13.2], [14.0]], False),
    # busy, but far beyond it: ConvInteger's 9x
    ([[0.73, 0.9], [0.75, 1.1]], [[6.7, 7.0], [6.5, 6.9]], True),
    # one block each: no noise measured, the plain limit
    ([[10.0]], [[11.5]], True),
    ([[10.0]], [[10.9]], False),
])
def test_a_slowdown_counts_only_beyond_the_measured_noise(before: list[list[float]], after: list[list[float]],
                                                          slower: bool) -> None:
    assert slower_beyond_noise(PhaseTimes(before), PhaseTimes(after)) is slower


def _fake_bench(monkeypatch: pytest.MonkeyPatch, script: Callable[[str, int, str], float],
                calls: list[tuple[str, str]] | None = None) -> None:
    """Replace bench_phases by a timer whose every run of model ``label`` on phase ``phase`` takes
    ``script(label, block, phase)`` seconds (``block``: how many times that label was timed before)."""
    seen: dict[str, int] = {}

    def fake(models: Sequence[tuple[str, Any]], phases: Sequence[Any], **_: Any) -> list[BenchResult]:
        results = []
        blocks = {label: seen.get(label, 0) for label, _ in models}
        for label, _ in models:
            seen[label] = seen.get(label, 0) + 1
        for phase in phases:
            timings = []
            for label, _ in models:
                timings.append(Timing(label, [script(label, blocks[label], phase.name)] * 3))
                if calls is not None:
                    calls.append((label, phase.name))
            results.append(BenchResult(timings, 3, 1, "all", {k: list(v.shape) for k, v in phase.feed.items()}))
        return results

    monkeypatch.setattr(bench_module, "bench_phases", fake)


def test_a_result_slower_only_within_the_noise_is_written_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """First blocks: 1.5x; timed again, the original's best moves 45% (a busy machine): written, the note says
    why; the latency reported is each model's best."""
    times = {("original", 0): 1.0e-3, ("original", 1): 1.45e-3, ("fp16", 0): 1.5e-3, ("fp16", 1): 1.52e-3}
    _fake_bench(monkeypatch, lambda label, block, _: times[(label, block)])
    result = gsrewrite.compress(_mlp(), "fp16", bench_runs=3)
    assert result.latency_ms == pytest.approx((1.0, 1.5))
    assert result.latency_noise == pytest.approx(0.45)
    assert any("within the measurement's noise" in note for note in result.notes), result.notes


def test_a_result_slower_beyond_the_noise_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    times = {("original", 0): 1.0e-3, ("original", 1): 1.02e-3, ("fp16", 0): 1.5e-3, ("fp16", 1): 1.52e-3}
    _fake_bench(monkeypatch, lambda label, block, _: times[(label, block)])
    with pytest.raises(SlowerModelError, match=r"1\.50x, more than 1\.10x beyond the noise of 2%"):
        gsrewrite.compress(_mlp(), "fp16", bench_runs=3)
    _fake_bench(monkeypatch, lambda label, block, _: times[(label, block)])
    written = gsrewrite.compress(_mlp(), "fp16", bench_runs=3, allow_slower=True)
    assert written.latency_ms is not None


def test_a_decoder_is_judged_on_its_decode_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The KV-cache fixture: timed at a decode step (1 token over a past of 128) and a prefill (128 tokens); the
    prefill 1.6x slower does not refuse a result whose decode step is faster (what int4 is for), and says so."""
    calls: list[tuple[str, str]] = []
    shapes: dict[str, dict[str, Any]] = {}
    real = phases_module.decoder_phases

    def phases(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        assert found is not None
        shapes.update({p.name: {k: v.shape for k, v in p.feed.items()} for p in found})
        return found

    monkeypatch.setattr(phases_module, "decoder_phases", phases)
    speed = {"decode": 0.5, "prefill": 1.6}
    _fake_bench(monkeypatch, lambda label, _, phase: 1e-3 * (1.0 if label == "original" else speed[phase]), calls)
    result = gsrewrite.compress(str(LLAMA_KV), "int4", bench_runs=3, min_elements=1, accuracy_level=0, **RELAXED)
    assert set(result.latency_phases) == {"decode", "prefill"}
    assert result.latency_ms == pytest.approx((1.0, 0.5))
    assert shapes["decode"]["input_ids"][1] == 1 and shapes["decode"]["past_key_values.0.key"][2] == 128
    assert shapes["prefill"]["input_ids"][1] == 128 and shapes["prefill"]["past_key_values.0.key"][2] == 0
    assert ("original", "decode") in calls and ("int4", "decode") in calls
    assert any("prefill is slower" in note for note in result.notes), result.notes
    assert "decode step" in result.report()


def test_the_faster_accuracy_level_is_kept_then_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    """MatMulNBits at accuracy_level 0 and 4 timed side by side: the decode step decides (4: 2x faster there, its
    prefill slower), every MatMulNBits of the result carries it, and the result is validated as it is written."""
    def script(label: str, _: int, phase: str) -> float:
        if label == "accuracy_level 4":
            return 1e-3 * (0.5 if phase == "decode" else 1.3)
        return 1e-3
    _fake_bench(monkeypatch, script)
    checked: list[onnx.ModelProto] = []
    real_check = compress_module._validate

    def validate(result: Any, *args: Any, **kwargs: Any) -> None:
        checked.append(result.model)
        real_check(result, *args, **kwargs)

    monkeypatch.setattr(compress_module, "_validate", validate)
    result = gsrewrite.compress(str(LLAMA_KV), "int4", bench_runs=3, min_elements=1, **RELAXED)
    levels = {a.i for n in result.model.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
              if a.name == "accuracy_level"}
    assert levels == {4}
    assert checked and all(a.i == 4 for n in checked[0].graph.node if n.op_type == "MatMulNBits"
                           for a in n.attribute if a.name == "accuracy_level")
    assert any("accuracy_level 4" in note and "decode" in note for note in result.notes), result.notes


@pytest.mark.parametrize(("decode4", "prefill4", "kept"), [(1.02e-3, 0.7e-3, 4), (1.02e-3, 1.3e-3, 0),
                                                           (1.3e-3, 0.5e-3, 0)])
def test_a_decode_step_within_five_percent_leaves_the_choice_to_the_prefill(
        monkeypatch: pytest.MonkeyPatch, decode4: float, prefill4: float, kept: int) -> None:
    def script(label: str, _: int, phase: str) -> float:
        if label == "accuracy_level 4":
            return decode4 if phase == "decode" else prefill4
        return 1e-3
    _fake_bench(monkeypatch, script)
    result = gsrewrite.compress(str(LLAMA_KV), "int4", bench_runs=3, min_elements=1, **RELAXED)
    assert any(f"accuracy_level {kept} (measured" in note for note in result.notes), result.notes


def test_an_explicit_accuracy_level_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    _fake_bench(monkeypatch, lambda *_: 1e-3, calls)
    result = gsrewrite.compress(str(LLAMA_KV), "int4", bench_runs=3, min_elements=1, accuracy_level=4, **RELAXED)
    assert not any(label.startswith("accuracy_level") for label, _ in calls)
    assert all(a.i == 4 for n in result.model.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
               if a.name == "accuracy_level")


def test_the_level_is_measured_without_a_latency_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_runs 0 (and optimize --compress, which asks for no latency): the levels are still timed side by side,
    LEVEL_RUNS each, the original is not, and the faster level is written and validated."""
    calls: list[tuple[str, str]] = []
    _fake_bench(monkeypatch, lambda label, _, phase: 1e-3 * (0.4 if label == "accuracy_level 4" else 1.0), calls)
    result = gsrewrite.compress(str(LLAMA_KV), "int4", min_elements=1, **RELAXED)
    assert not any(label == "original" for label, _ in calls)
    assert ("accuracy_level 0", "decode") in calls and ("accuracy_level 4", "decode") in calls
    assert {a.i for n in result.model.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
            if a.name == "accuracy_level"} == {4}
    assert result.latency_ms is None
    assert result.validated and result.outputs
    fused = gsrewrite.optimize(str(LLAMA_KV), compress=gsrewrite.CompressOptions("int4", {"min_elements": 1},
                                                                                  **RELAXED))
    assert fused.compressed is not None
    assert {a.i for n in fused.model.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
            if a.name == "accuracy_level"} == {4}
    assert any("accuracy_level 4 (measured" in note for note in fused.compressed.notes), fused.compressed.notes
