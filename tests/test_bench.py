"""``gsrewrite bench``: interleaved timings, ratios to the first model, onnxruntime's optimized model saved."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.cli import main


def _model(path: Path, layers: int, width: int = 64) -> Path:
    rng = np.random.default_rng(layers)
    nodes, inits, name = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32) / width,
                                             f"w{i}"))
        nodes.append(helper.make_node("MatMul", [name, f"w{i}"], [f"h{i}"]))
        name = f"h{i}"
    nodes.append(helper.make_node("Relu", [name], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_bench_times_models_interleaved_and_saves_onnxruntimes_model(tmp_path: Path) -> None:
    # 1 against 12 MatMuls of 256 x 256 by 256 x 256 (16.8 M MACs each): a difference no timing noise hides
    small, large = _model(tmp_path / "a.onnx", 1, 256), _model(tmp_path / "b.onnx", 12, 256)
    saved = tmp_path / "ort.onnx"
    done = CliRunner().invoke(main, ["bench", str(small), str(large), "--runs", "5", "--json", "--input-shape",
                                     "x:256x256", "--save-optimized", str(saved)])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert [m["model"] for m in data["models"]] == [str(small), str(large)]
    assert data["models"][0]["ratio_min"] == 1.0 and data["models"][1]["ratio_min"] > 2.0
    assert data["inputs"] == {"x": [256, 256]} and data["runs"] == 5
    assert onnx.load(saved).graph.node  # onnxruntime wrote its optimized graph
    table = CliRunner().invoke(main, ["bench", str(small), "--runs", "2"])
    assert table.exit_code == 0 and "min ms" in table.output
    bad = CliRunner().invoke(main, ["bench", str(small), "--ort-level", "max"])
    assert bad.exit_code == 2


def test_optimize_tune_times_each_matched_family_and_keeps_the_fastest(tmp_path: Path) -> None:
    """A GELU (erf form) between MatMuls: the candidates are all fusions, without gelu, and the input."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Div", ["m", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a"]),
             helper.make_node("Mul", ["m", "a"], ["p"]), helper.make_node("Mul", ["p", "half"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = tmp_path / "gelu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    done = CliRunner().invoke(main, ["optimize", str(model), str(tmp_path / "out.onnx"), "--tune", "--json"])
    assert done.exit_code == 0, done.output
    tuned = json.loads(done.stdout)["tune"]
    assert set(tuned["latency_ms"]) == {"all fusions", "without gelu", "the input (no fusion)"}
    assert tuned["kept"] in tuned["latency_ms"] and tuned["reason"]
    assert onnx.load(tmp_path / "out.onnx").graph.node


def test_a_model_that_cannot_be_serialized_is_timed_with_its_weights_as_arrays(monkeypatch) -> None:
    """Over 2 GB a model cannot be serialized; bench then gives onnxruntime the graph and the weights as arrays
    (simulated here: the serializer says "too large" for every model)."""
    from gsrewrite.pipelines import bench as bench_module

    model, weight = _matmul_model(1024, 2560)  # 10 MiB of weights
    from gsrewrite.validation import runner

    monkeypatch.setattr(runner, "serialize", lambda m: None)
    session = bench_module.session(model, 1, "all")
    x = np.ones((1, 1024), np.float32)
    np.testing.assert_allclose(session.run({"x": x})["y"], x @ weight, rtol=1e-4, atol=1e-3)


def test_a_graph_over_2_gb_without_its_weights_is_timed_through_a_temporary_folder(monkeypatch, tmp_path) -> None:
    """When neither the whole model nor its graph alone fits protobuf's 2 GB (simulated), bench passes the model
    to onnxruntime as a file with external data in a temporary folder (as validation does), removed with the
    session."""
    import gc
    import tempfile

    from gsrewrite.pipelines import bench as bench_module
    from gsrewrite.validation import runner

    model, weight = _matmul_model(64, 32)
    monkeypatch.setattr(runner, "serialize", lambda m: None)
    monkeypatch.setattr(runner, "in_memory_model", lambda m, data=None: None)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    session = bench_module.session(model, 1, "all")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("gsrewrite-validate-")]
    x = np.ones((1, 64), np.float32)
    np.testing.assert_allclose(session.run({"x": x})["y"], x @ weight, rtol=1e-4, atol=1e-4)
    session.close()
    gc.collect()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("gsrewrite-validate-")]


def _matmul_model(rows: int, cols: int) -> tuple[onnx.ModelProto, np.ndarray]:
    """y = x @ w with a random [rows, cols] weight."""
    weight = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), weight


GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _bench_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GSREWRITE_")}
    return subprocess.run([str(GSREWRITE), "bench", *map(str, args)], capture_output=True, text=True, timeout=120,
                          env=env)


def test_default_runs_are_bounded_by_the_time_budget_and_counted(tmp_path: Path) -> None:
    """8 MatMuls of 1024 x 1024 by one 1024 x 1024 weight (8.6 G MACs a run: 0.1-1 s on one thread): 20 runs and
    2 warm-ups would take 2-22 s; with a 1 s budget the warm-up stops after the round that reaches 0.2 s and the
    timed rounds when the next would end past what is left, and the table says how many ran. Before: always 20 + 2
    (a model taking seconds per run did not finish in 120 s)."""
    weight = numpy_helper.from_array(np.eye(1024, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", [f"h{i}", "w"], [f"h{i + 1}"]) for i in range(8)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1024, 1024])],
                              [helper.make_tensor_value_info("h8", TensorProto.FLOAT, None)], [weight])
    model = tmp_path / "slow.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    done = _bench_cli(model, "--time-budget", "1")
    assert done.returncode == 0, done.stderr
    shown = re.search(r"Latency \((\d+) interleaved run\(s\) \(the 1 s time budget; --runs N for more\)", done.stdout)
    row = re.search(r"slow\.onnx\s+([\d.]+)\s", done.stdout)
    assert shown and row, done.stdout
    runs, min_s = int(shown.group(1)), float(row.group(1)) / 1000
    assert 1 <= runs < 20 and min_s > 0.05
    # no round starts once the mean round would end it past the budget: the timed runs fit it, but for one round
    assert (runs - 1) * min_s <= 1.0


def test_explicit_runs_and_warmup_are_honoured_whatever_the_budget(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx", 2, 64)
    done = _bench_cli(model, "--runs", "7", "--warmup", "3", "--time-budget", "0.001", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["runs"], data["warmup"], data["time_budget_s"]) == (7, 3, None)
    fast = _bench_cli(model, "--json")  # a fast model gets the 20 runs and 2 warm-ups it always had
    assert fast.returncode == 0, fast.stderr
    assert (json.loads(fast.stdout)["runs"], json.loads(fast.stdout)["warmup"]) == (20, 2)


def test_the_library_budgets_warm_up_and_timed_rounds(monkeypatch) -> None:
    """Rounds of a simulated 1 s each against a 10 s budget: warm-up rounds while the next ends within a fifth of
    the budget (2 s): 2; timed rounds while the next ends within the 8 s left: 8; 10 s in all."""
    from gsrewrite.pipelines import bench as bench_module

    clock = [0.0]

    class Slow:
        last_seconds = 1.0
        input_names = ("x",)

        def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            clock[0] += 1.0
            return {}

        def close(self) -> None:
            pass

    monkeypatch.setattr(bench_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(bench_module, "session", lambda *args, **kwargs: Slow())
    model, _ = _matmul_model(4, 4)
    result = bench_module.bench([("m", model)], inputs={"x": np.ones((1, 4), np.float32)}, time_budget=10.0)
    assert (result.warmup, result.runs, result.cut_short) == (2, 8, True)
    assert result.timings[0].times == [1.0] * 8


def test_a_decoder_is_timed_at_a_decode_step_and_a_prefill_with_tokens_per_second() -> None:
    """The installed script on a KV-cache export: a decode step (1 token over --past cached ones: the mask spans
    both, positions follow the past) and a prefill (--new-tokens, no past), tokens per second beside ms."""
    model = Path(__file__).parent / "fixtures" / "models" / "llama.dynamo_kv.onnx"
    done = subprocess.run([str(GSREWRITE), "bench", str(model), "--past", "24", "--new-tokens", "6", "--runs", "2",
                           "--warmup", "0", "--input-shape", "batch=1", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    phases = json.loads(done.stdout)["phases"]
    decode, prefill = phases["decode"], phases["prefill"]
    assert decode["inputs"]["input_ids"] == [1, 1] and decode["inputs"]["attention_mask"] == [1, 25]
    assert decode["inputs"]["past_key_values.0.key"][2] == 24 and decode["past"] == 24 and decode["tokens"] == 1
    assert prefill["inputs"]["input_ids"] == [1, 6] and prefill["inputs"]["past_key_values.0.key"][2] == 0
    assert prefill["tokens"] == 6 and prefill["runs"] == 2
    for phase in (decode, prefill):
        ms = phase["models"][0]["min_ms"]
        assert abs(phase["tokens_per_s"][0] - phase["tokens"] / (ms / 1000)) < 0.01 * phase["tokens_per_s"][0]
