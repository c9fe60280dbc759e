"""MACs per op against hand-computed values, symbolic totals, fused == unfused totals, the memory planner, and the
analysis commands run as the installed console script would be (CliRunner for speed; the wheel-installed CLI is
covered by tests/test_installed_plugin.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.cli import main
from gsrewrite.profiling.costs import profile_model
from gsrewrite.shapes.symdim import sym
from gsrewrite.shapes.walk import parse_input_shapes

F = TensorProto.FLOAT


def _one(node: onnx.NodeProto, inputs, inits=(), opset=17, domain_opsets=()):
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(node.output[0], F, None)],
                              list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *domain_opsets])
    return profile_model(model).nodes[0].macs


def _w(name, shape):
    return numpy_helper.from_array(np.ones(shape, np.float32), name)


def _x(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


@pytest.mark.parametrize(("node", "inputs", "inits", "macs"), [
    # Conv with groups and dilations: out 1x8x(10-2*2)x(10-2*2)=1x8x6x6, 2 input channels per group, 3x3 kernel
    (helper.make_node("Conv", ["x", "w"], ["y"], group=2, dilations=[2, 2]), [_x("x", [1, 4, 10, 10])],
     [_w("w", (8, 2, 3, 3))], 8 * 6 * 6 * 2 * 9),
    # + bias: one add per output element
    (helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1]),
     [_x("x", [2, 3, 8, 8])], [_w("w", (4, 3, 3, 3)), _w("b", (4,))], 2 * 4 * 4 * 4 * 27 + 2 * 4 * 4 * 4),
    # MatMul broadcasting [3, 1, 2, 4] against a [5, 4, 6] stack: out [3, 5, 2, 6], K = 4
    (helper.make_node("MatMul", ["a", "b"], ["y"]), [_x("a", [3, 1, 2, 4])], [_w("b", (5, 4, 6))],
     3 * 5 * 2 * 6 * 4),
    # Gemm with both transposes and C: M=3 N=5 K=4
    (helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1), [_x("a", [4, 3])],
     [_w("b", (5, 4)), _w("c", (5,))], 3 * 5 * 4 + 3 * 5),
    # pooling: output elements x kernel
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2]), [_x("x", [1, 2, 9, 9])], [],
     2 * 4 * 4 * 9),
    (helper.make_node("GlobalAveragePool", ["x"], ["y"]), [_x("x", [1, 2, 9, 9])], [], 2 * 81),
    # Resize: 4 per output element (linear), 0 for nearest
    (helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear"), [_x("x", [1, 2, 4, 4])],
     [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")], 2 * 8 * 8 * 4),
    (helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest"), [_x("x", [1, 2, 4, 4])],
     [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")], 0),
    # Pow by 2 is one multiply per element; Erf is not free
    (helper.make_node("Pow", ["x", "two"], ["y"]), [_x("x", [3, 4])],
     [numpy_helper.from_array(np.array(2.0, np.float32), "two")], 12),
    (helper.make_node("Erf", ["x"], ["y"]), [_x("x", [3, 4])], [], 12 * 45),
])
def test_macs_match_hand_computed_values(node, inputs, inits, macs) -> None:
    assert _one(node, inputs, inits) == macs


def test_attention_counts_what_it_replaces() -> None:
    """com.microsoft Attention, B=2 S=8 hidden 16, 2 heads of 8: projections + bias, QK^T, scale, mask add,
    Softmax (36 per score), PV."""
    node = helper.make_node("Attention", ["x", "w", "b", "mask"], ["y"], domain="com.microsoft", num_heads=2)
    inputs = [_x("x", [2, 8, 16]), helper.make_tensor_value_info("mask", TensorProto.INT32, [2, 8])]
    macs = _one(node, inputs, [_w("w", (16, 48)), _w("b", (48,))],
                domain_opsets=[helper.make_opsetid("com.microsoft", 1)])
    scores = 2 * 2 * 8 * 8
    expected = 2 * 8 * 16 * 48 + 2 * 8 * 48 + scores * 8 + scores + scores * 36 + scores * 8 + scores
    assert macs == expected


def test_symbolic_totals_are_polynomials_and_bind() -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    graph = helper.make_graph([node, helper.make_node("Softmax", ["y"], ["z"])], "g", [_x("a", ["batch", "seq", 4])],
                              [helper.make_tensor_value_info("z", F, None)], [_w("b", (4, 6))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    profile = profile_model(model)
    assert profile.macs == 24 * sym("batch") * sym("seq") + 36 * 6 * sym("batch") * sym("seq")
    assert profile.bind({"batch": 2, "seq": 3}).macs == 2 * 3 * (24 + 216)
    assert profile_model(model, parse_input_shapes(["seq=3", "batch=2"])).macs == 2 * 3 * (24 + 216)
    data = profile.to_dict()
    assert set(data) >= {"total", "by_op_type", "nodes"}
    assert set(data["total"]) >= {"macs", "params", "weight_bytes", "activation_bytes"}
    assert data["total"]["params"] == 24 and data["total"]["weight_bytes"] == 96


def test_sparsity_counts_zero_elements_and_zero_blocks() -> None:
    weight = np.ones((4, 8), np.float32)
    weight[0, :4] = 0  # one zero block of 4
    weight[1, 1] = 0  # one zero element in a non-zero block
    node = helper.make_node("MatMul", ["a", "w"], ["y"])
    graph = helper.make_graph([node], "g", [_x("a", [2, 4])], [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(weight, "w")])
    profile = profile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert profile.weights.sparsity == pytest.approx(5 / 32) and profile.weights.block_sparsity == pytest.approx(1 / 8)


@pytest.mark.parametrize("where", ["inline", "external", "weightless"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
@pytest.mark.parametrize("threaded", [False, True])
def test_sparsity_of_weights_larger_than_a_read_chunk(tmp_path: Path, where: str, dtype, threaded: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights of several scan chunks (with -0.0, zero blocks across chunk boundaries and an odd row length where
    blocks do not apply) count the zeros and zero blocks numpy counts, wherever the bytes are, whether scanned
    on the calling thread (a small model) or by workers beside the walk (a large one)."""
    import threading

    from gsrewrite.profiling import costs

    monkeypatch.setattr(costs, "_CHUNK_ELEMENTS", 1 << 16)  # 700x1024 items: 11 chunks
    monkeypatch.setattr(costs, "_THREADED_BYTES", 0 if threaded else 1 << 40)
    scanned_on: set[str] = set()
    scan = costs._weight_stats

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        scanned_on.add(threading.current_thread().name)
        return scan(*args, **kwargs)

    monkeypatch.setattr(costs, "_weight_stats", spy)
    rng = np.random.default_rng(0)
    big = (rng.standard_normal((700, 1024)) * 3).astype(dtype)
    big[rng.random(big.shape) < 0.3] = 0
    big[5, 8:400] = 0  # zero blocks
    if big.dtype.kind == "f":
        big[6, :4] = -0.0  # a zero block of negative zeros
    odd = (rng.standard_normal((300, 1023)) * 3).astype(dtype)  # 1023 per row: no blocks
    odd[rng.random(odd.shape) < 0.5] = 0
    nodes = [helper.make_node("MatMul", ["a", "w"], ["y"]), helper.make_node("MatMul", ["b", "v"], ["z"])]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", elem, [2, 700]),
                                           helper.make_tensor_value_info("b", elem, [2, 300])],
                              [helper.make_tensor_value_info(n, elem, None) for n in ("y", "z")],
                              [numpy_helper.from_array(big, "w"), numpy_helper.from_array(odd, "v")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    if where == "inline":
        profile = profile_model(model)
    else:
        onnx.save(model, str(path), save_as_external_data=where.startswith("external"), location="m.data",
                  size_threshold=1024)
        profile = gsrewrite.profile(str(path))
    zeros = int((big == 0).sum() + (odd == 0).sum())
    blocks = big.size // 4
    zero_blocks = int((big.reshape(-1, 4) == 0).all(axis=1).sum())
    assert profile.weights.sparsity == pytest.approx(zeros / (big.size + odd.size))
    assert profile.weights.block_sparsity == pytest.approx(zero_blocks / blocks)
    by_node = {n.name or n.op_type + str(i): n for i, n in enumerate(profile.nodes)}
    assert len(by_node) == 2
    on_workers = {name.startswith("gsrewrite-sparsity") for name in scanned_on}
    assert on_workers == ({True} if threaded else {False})


def test_memory_plan_reuses_and_stays_above_its_lower_bound() -> None:
    """A chain x -> Exp -> Reshape (a view) -> Mul -> Sqrt -> Relu -> y."""
    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Reshape", ["a", "shape"], ["b"]),
             helper.make_node("Mul", ["b", "b"], ["c"]), helper.make_node("Sqrt", ["c"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_x("x", ["n", 256])], [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(np.array([-1], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    plan = gsrewrite.plan_memory(model, ["n=4"])
    assert plan.naive_bytes == 4 * 4096  # a, b, c, d: 4 KiB each
    # the view shares a, and Mul and Sqrt write in place into the input that dies with them: one buffer
    assert plan.lower_bound_bytes == plan.arena_bytes == 4096
    for one in plan.buffers:  # no two buffers live at once share bytes
        for other in plan.buffers:
            if one is not other and one.overlaps(other):
                assert one.offset + one.size <= other.offset or other.offset + other.size <= one.offset


@pytest.fixture
def bert_like(tmp_path: Path) -> Path:
    """MatMul + Relu with dynamic (batch, seq)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_x("x", ["batch", "seq", 8])], [helper.make_tensor_value_info("y", F, None)],
                              [_w("w", (8, 8))])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_cli_commands(bert_like: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(main, ["profile", str(bert_like), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["total"]["macs"] == "72*batch*seq"
    csv = runner.invoke(main, ["profile", str(bert_like), "--format", "csv", "--input-shape", "batch=1",
                               "--input-shape", "seq=2"])
    assert csv.exit_code == 0 and csv.stdout.splitlines()[1].split(",")[2] == "128"
    page = tmp_path / "p.html"
    assert runner.invoke(main, ["profile", str(bert_like), "--plot", str(page)]).exit_code == 0
    assert "<svg" in page.read_text()
    again = runner.invoke(main, ["profile", str(bert_like), "--plot", str(page)])
    assert again.exit_code == 2 and "--force" in again.output
    mem = runner.invoke(main, ["memory", str(bert_like), "--json", "--input-shape", "seq=4"])
    assert mem.exit_code == 0 and json.loads(mem.stdout)["bindings"] == {"seq": 4, "batch": 2}
    out = tmp_path / "s.onnx"
    shapes = runner.invoke(main, ["shapes", str(bert_like), "-o", str(out), "--check"])
    assert shapes.exit_code == 0, shapes.output
    assert any(v.name == "h" for v in onnx.load(out).graph.value_info)
    cg = runner.invoke(main, ["compute-graph", str(bert_like), "-o", str(tmp_path / "c.onnx"), "--shape-engine",
                              str(tmp_path / "c.json")])
    assert cg.exit_code == 0, cg.output
    engine = json.loads((tmp_path / "c.json").read_text())
    assert engine["tensors"]["h"] == ["batch", "seq", 8]
    bad = runner.invoke(main, ["profile", str(bert_like), "--input-shape", "x:1,-2,8"])
    assert bad.exit_code == 2 and "negative" in bad.output


def test_folding_batchnorm_into_conv_keeps_the_total() -> None:
    """Conv (no bias) + BatchNormalization counts what the Conv with the folded bias counts after optimize."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")] + [
        numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, name) for name in ("s", "b", "m", "v")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_x("x", ["n", 3, 8, 8])], [helper.make_tensor_value_info("y", F, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = gsrewrite.optimize(model, validate=False).model
    assert [n.op_type for n in folded.graph.node] == ["Conv"]
    before, after = gsrewrite.profile(model).macs, gsrewrite.profile(folded).macs
    assert before == after == sym("n") * 4 * 64 * (27 + 1)


def test_placement_is_valid_and_never_below_the_lower_bound() -> None:
    """Random lifetimes and sizes: no two buffers live at once overlap, and the arena is at least the bound."""
    import random

    from gsrewrite.profiling.memory import Buffer, _aligned, _best_placement, _lower_bound

    rng = random.Random(7)
    for _ in range(20):
        buffers = []
        for i in range(40):
            start = rng.randrange(30)
            buffers.append(Buffer(f"t{i}", rng.choice([64, 256, 1000, 4096, 20000]), start,
                                  start + rng.randrange(1, 10)))
        lower, _ = _lower_bound(buffers, 40)
        arena, _, offsets = _best_placement(buffers, lower)
        assert arena >= lower
        for i, a in enumerate(buffers):
            for j, b in enumerate(buffers):
                if i < j and a.overlaps(b):
                    assert offsets[i] + _aligned(a.size) <= offsets[j] or offsets[j] + _aligned(b.size) <= offsets[i]


def test_the_allocator_placement_is_valid_and_used_past_the_work_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocator's placement in time order (what the planner keeps when the buffers overlap in too many pairs
    for the fixed orders) never gives two buffers live at once the same bytes, and stays above the bound."""
    import random

    from gsrewrite.profiling import memory
    from gsrewrite.profiling.memory import Buffer, _aligned, _lower_bound, _overlapping_pairs, _place_in_time_order

    rng = random.Random(11)
    for _ in range(30):
        buffers = []
        for i in range(60):
            start = rng.randrange(40)
            buffers.append(Buffer(f"t{i}", rng.choice([64, 100, 4096, 20000, 65536]), start,
                                  start + rng.randrange(0, 15)))
        pairs = sum(1 for i, a in enumerate(buffers) for b in buffers[i + 1:] if a.overlaps(b))
        assert _overlapping_pairs(buffers) == pairs
        offsets = _place_in_time_order(buffers)
        lower, _ = _lower_bound(buffers, 60)
        assert max(o + _aligned(b.size) for o, b in zip(offsets, buffers, strict=True)) >= lower
        for i, a in enumerate(buffers):
            for j, b in enumerate(buffers):
                if i < j and a.overlaps(b):
                    assert offsets[i] + _aligned(a.size) <= offsets[j] or offsets[j] + _aligned(b.size) <= offsets[i]
        monkeypatch.setattr(memory, "PLACEMENT_WORK", 2 * pairs + len(buffers))  # one pair too many
        _, strategy, chosen = memory._best_placement(buffers, lower)
        assert strategy == "in time order, best fit" and chosen == offsets


def test_plot_png_needs_matplotlib_and_says_so(bert_like: Path, tmp_path: Path) -> None:
    import importlib.util

    out = tmp_path / "p.png"
    done = CliRunner().invoke(main, ["profile", str(bert_like), "--plot", str(out)])
    if importlib.util.find_spec("matplotlib") is None:
        assert done.exit_code == 2 and "gsrewrite[plot]" in done.output and not out.exists()
    else:
        assert done.exit_code == 0 and out.read_bytes().startswith(b"\x89PNG")
    wrong = CliRunner().invoke(main, ["profile", str(bert_like), "--plot", str(tmp_path / "p.txt")])
    assert wrong.exit_code == 2 and ".html" in wrong.output


def test_memory_plan_is_the_same_on_a_slow_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local search is bounded by moves and work, not a clock: a machine where every clock read says a
    second has passed plans the same arena (it reached the lower bound on the GPT-2 fixture, whose residual
    stream needs the search)."""
    import time

    path = Path(__file__).parent / "fixtures" / "models" / "gpt2.legacy.onnx"
    plan = gsrewrite.plan_memory(str(path))
    assert "local search" in plan.strategy and plan.arena_bytes == plan.lower_bound_bytes
    clock = iter(range(10**9))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(clock)))
    monkeypatch.setattr(time, "monotonic", lambda: float(next(clock)))
    slow = gsrewrite.plan_memory(str(path))
    assert (slow.arena_bytes, slow.strategy) == (plan.arena_bytes, plan.strategy)
    assert [b.offset for b in slow.buffers] == [b.offset for b in plan.buffers]


def test_profile_without_sparsity_reads_no_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sparsity=False`` (what ``info``'s one-line total uses) counts the same MACs and parameters without
    reading a weight: the scan is never called."""
    from gsrewrite.profiling import costs

    weight = np.ones((64, 32), np.float32)
    weight[:, :8] = 0
    node = helper.make_node("MatMul", ["a", "w"], ["y"])
    graph = helper.make_graph([node], "g", [_x("a", [2, 64])], [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    full = profile_model(model)
    assert full.weights.sparsity == pytest.approx(0.25)
    monkeypatch.setattr(costs, "_weight_stats", lambda *a, **k: pytest.fail("a weight was read"))
    light = profile_model(model, sparsity=False)
    assert (light.macs, light.params, light.weight_bytes) == (full.macs, full.params, full.weight_bytes) == \
        (2 * 64 * 32, 64 * 32, 64 * 32 * 4)
    assert light.weights.sparsity is None and light.nodes[0].weights is None


def test_the_installed_cli_profiles_without_reading_weights_and_shows_its_stages(tmp_path: Path) -> None:
    """``--no-sparsity`` gives the same totals with sparsity unknown; ``-v`` logs the stages (what the progress
    display shows on a terminal)."""
    import subprocess
    import sys

    gsrewrite_cli = Path(sys.executable).parent / "gsrewrite"
    weight = np.ones((256, 128), np.float32)
    weight[:64] = 0
    node = helper.make_node("MatMul", ["a", "w"], ["y"])
    graph = helper.make_graph([node], "g", [_x("a", [2, 256])], [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(weight, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path),
              save_as_external_data=True, location="m.data", size_threshold=0)
    runs = {}
    for flag in ("--sparsity", "--no-sparsity"):
        done = subprocess.run([str(gsrewrite_cli), "-v", "profile", str(path), "--json", flag], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        runs[flag] = (json.loads(done.stdout)["total"], done.stderr)
    (full, log_full), (light, log_light) = runs["--sparsity"], runs["--no-sparsity"]
    assert full["sparsity"] == pytest.approx(0.25) and light["sparsity"] is None
    assert {k: v for k, v in full.items() if "sparsity" not in k} == \
        {k: v for k, v in light.items() if "sparsity" not in k}
    assert "reading weights for sparsity" in log_full and "reading weights for sparsity" not in log_light
    assert "inferring shapes" in log_full and "counting" in log_full
    (tmp_path / "m.data").unlink()  # a missing weights file is still refused on load: one line, exit 2
    done = subprocess.run([str(gsrewrite_cli), "profile", str(path), "--json", "--no-sparsity"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "m.data" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_sparsity_scan_survives_a_short_file(tmp_path: Path) -> None:
    """A weight whose bytes lie past the end of its file (a file shortened after the model was checked) gets no
    sparsity, not a crash (the file is mapped, and a range past the mapping is never read)."""
    from gsrewrite.profiling import costs

    weight = np.ones((64, 64), np.float32)
    weight[0] = 0
    tensor = numpy_helper.from_array(weight, "w")
    onnx.external_data_helper.set_external_data(tensor, "w.data", offset=0, length=weight.nbytes)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    (tmp_path / "w.data").write_bytes(weight.tobytes())
    files = costs._MappedFiles()
    found = costs._weight_stats(tensor, str(tmp_path), files)
    files.close()
    assert found is not None and found.zeros == 64
    (tmp_path / "w.data").write_bytes(weight.tobytes()[:-4])
    files = costs._MappedFiles()
    assert costs._weight_stats(tensor, str(tmp_path), files) is None
    files.close()
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"])], "g", [_x("a", [2, 64])],
        [helper.make_tensor_value_info("y", F, None)], [tensor]), opset_imports=[helper.make_opsetid("", 17)])
    profile = profile_model(model, base_dir=str(tmp_path))
    assert profile.macs == 2 * 64 * 64 and profile.weights.sparsity is None
