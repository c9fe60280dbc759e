"""Constant folding checks sizes before it evaluates: a small hostile model never makes it allocate much.

Each case is a node whose inputs are small constants but whose output (or whose evaluation) would be huge:
it must stay a node, with the reason recorded, and folding must allocate next to nothing (numpy reports its
buffers to tracemalloc). The CLI cases run the installed console script capped at 4 GiB of address space.
"""

from __future__ import annotations

import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from hostile.runner import measured_run
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.graph.conversion import import_graph
from gsrewrite.graph.fold import fold_constants

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
BIG = 2**40
I64, F32 = np.int64, np.float32
OVER = "over --max-fold-bytes"
WORK = "would touch"


def _model(op: str, inputs: list[np.ndarray | None], attrs: dict | None = None, *, opset: int = 17,
           outputs: int = 1) -> onnx.ModelProto:
    """One ``op`` node named ``target`` reading constants ``in0, in1, ...``; each output feeds an Identity."""
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    inits = [numpy_helper.from_array(v, n) for n, v in zip(names, inputs, strict=True) if n]
    results = [f"r{i}" for i in range(outputs)]
    nodes = [helper.make_node(op, names, results, name="target", **(attrs or {}))]
    nodes += [helper.make_node("Identity", [r], [f"y{i}"]) for i, r in enumerate(results)]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None)
                                              for i in range(outputs)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _fold(model: onnx.ModelProto, max_bytes: int = 1 << 20) -> tuple[gs.Graph, dict[str, str], int]:
    """Fold ``model``; returns the graph, the skipped folds and the peak of traced allocations while folding."""
    graph, _ = import_graph(model)
    skipped: dict[str, str] = {}
    tracemalloc.start()
    try:
        fold_constants(graph, max_bytes, skipped)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return graph, skipped, peak


def _ones(*shape: int, dtype: type = F32) -> np.ndarray:
    return np.ones(shape, dtype)


SKIPPED = [
    ("ConstantOfShape", [np.array([BIG], I64)], {}, 17, OVER),
    ("ConstantOfShape", [np.array([BIG, BIG, BIG], I64)], {}, 17, OVER),  # 2**120 elements: no int64 overflow
    ("Expand", [_ones(1), np.array([BIG], I64)], {}, 17, OVER),
    ("Tile", [_ones(2, 2), np.array([2**15, 2**15], I64)], {}, 17, OVER),
    ("Range", [np.array(0, I64), np.array(BIG, I64), np.array(1, I64)], {}, 17, OVER),
    ("Range", [np.array(0, F32), np.array(1e30, F32), np.array(1, F32)], {}, 17, OVER),
    ("Mul", [_ones(65536, 1), _ones(1, 65536)], {}, 17, OVER),  # two 256 KB constants -> 16 GB
    ("Resize", [_ones(1, 1, 2, 2), None, np.array([1, 1, 1e6, 1e6], F32)], {}, 13, OVER),
    ("Resize", [_ones(1, 1, 2, 2), None, None, np.array([1, 1, BIG, 4], I64)], {}, 13, OVER),
    ("Upsample", [_ones(1, 1, 2, 2), np.array([1, 1, 1e6, 1e6], F32)], {}, 9, OVER),
    ("Pad", [_ones(2, 2), np.array([0, 0, BIG, 0], I64)], {}, 17, OVER),
    ("Concat", [_ones(16384)] * 64, {"axis": 0}, 17, OVER),  # 64 x 64 KB of one constant -> 4 MB
    ("Gather", [_ones(64, 1024), np.zeros(4096, I64)], {"axis": 0}, 17, OVER),
    ("OneHot", [np.array([0, 1], I64), np.array(BIG, I64), np.array([0, 1], F32)], {}, 17, OVER),
    ("Einsum", [_ones(65536), _ones(65536)], {"equation": "i,j->ij"}, 17, OVER),
    ("Einsum", [_ones(65536), _ones(65536)], {"equation": "i,j->"}, 17, WORK),  # 4 bytes out, 2**32 products
    ("MatMul", [_ones(65536, 1), _ones(1, 65536)], {}, 17, OVER),
    ("Cast", [_ones(1 << 20, dtype=np.int8)], {"to": TensorProto.DOUBLE}, 17, OVER),  # 1 MB -> 8 MB
    ("NonZero", [_ones(512, 512, dtype=np.int8)], {}, 17, OVER),  # bounded by its input: 2 x 2**18 int64
    ("TopK", [_ones(2**16), np.array([2**16], I64)], {}, 17, "would grow the model by 524,280 bytes"),
    ("TopK", [_ones(10), np.array([2**20], I64)], {}, 17, "not known before evaluation"),  # k > dim: invalid
    ("TopK", [_ones(10), np.array([2**60], I64)], {}, 17, "far too large"),
    ("CumSum", [_ones(1 << 19), np.array(0, I64)], {}, 17, OVER),  # 2 MB out of a 2 MB constant
    ("Conv", [_ones(1, 1, 512, 512), _ones(1, 1, 3, 3)], {}, 17, WORK),  # onnx.reference loops in Python
]


@pytest.mark.parametrize(("op", "inputs", "attrs", "opset", "reason"), SKIPPED,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(SKIPPED)])
def test_hostile_fold_is_skipped_before_allocating(op, inputs, attrs, opset, reason):
    outputs = 2 if op == "TopK" else 1
    graph, skipped, peak = _fold(_model(op, inputs, attrs, opset=opset, outputs=outputs))
    assert any(n.name == "target" for n in graph.nodes), "the node must stay a node"
    assert reason in skipped.get("target", ""), skipped
    inputs_bytes = sum(v.nbytes for v in inputs if v is not None)
    assert peak < inputs_bytes + (8 << 20), f"folding allocated {peak:,} bytes"


def test_mul_of_two_constants_stays_within_memory_and_time():
    start = time.process_time()  # CPU, not wall time: the same on a loaded machine
    _, skipped, peak = _fold(_model("Mul", [_ones(65536, 1), _ones(1, 65536)]))
    assert "17,179,869,184 bytes" in skipped["target"]
    assert peak < 4 << 20 and time.process_time() - start < 10


FOLDED = [
    ("Slice", [np.arange(10, dtype=I64), np.array([0], I64), np.array([2**62], I64), np.array([0], I64),
               np.array([BIG], I64)], {}, 17, 1),  # a huge step: one element
    ("Split", [np.arange(8, dtype=F32)], {"num_outputs": 2}, 18, 2),
    ("CumSum", [np.arange(6, dtype=F32), np.array(0, I64)], {}, 17, 1),
    ("Range", [np.array(0, I64), np.array(10, I64), np.array(3, I64)], {}, 17, 1),
    ("NonZero", [np.array([0, 3, 0, 5], I64)], {}, 17, 1),
    ("Pad", [_ones(2, 2), np.array([1, 1, 1, 1], I64)], {}, 17, 1),
    ("Resize", [_ones(1, 1, 2, 2), None, np.array([1, 1, 2, 2], F32)], {}, 13, 1),
    ("MatMul", [_ones(8, 4), _ones(4, 8)], {}, 17, 1),
]


@pytest.mark.parametrize(("op", "inputs", "attrs", "opset", "outputs"), FOLDED,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(FOLDED)])
def test_small_results_still_fold(op, inputs, attrs, opset, outputs):
    model = _model(op, inputs, attrs, opset=opset, outputs=outputs)
    graph, skipped, _ = _fold(model)
    assert not any(n.name == "target" for n in graph.nodes), skipped
    from onnx.reference import ReferenceEvaluator

    expected = ReferenceEvaluator(model).run(None, {})
    got = [t.values for t in graph.tensors().values() if t.name.startswith("r") and isinstance(t, gs.Constant)]
    assert len(got) == outputs
    for g, e in zip(sorted(got, key=lambda a: a.size), sorted(expected, key=lambda a: a.size), strict=True):
        np.testing.assert_array_equal(g, e)


def test_cap_counts_predicted_bytes_exactly():
    """A Cast whose output is exactly the cap folds; one byte less of cap and it is skipped, unevaluated."""
    model = _model("Cast", [_ones(1024, dtype=np.int8)], {"to": TensorProto.FLOAT})
    assert _fold(model, max_bytes=4096)[1] == {}
    graph, skipped, _ = _fold(model, max_bytes=4095)
    assert "4,096 bytes" in skipped["target"] and any(n.name == "target" for n in graph.nodes)


def _dims_model(dim: int | str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 3, 4])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axes"], ["bu"]),
             helper.make_node("Concat", ["bu", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Mul", ["r", "nf"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, I64), "zero"), numpy_helper.from_array(np.array([0], I64), "axes"),
             numpy_helper.from_array(np.array([12], I64), "rest")]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_huge_declared_dim_folds_as_a_number():
    from gsrewrite.pipelines import simplify

    result = simplify(_dims_model(BIG), validate=False)
    ops = [n.op_type for n in result.model.graph.node]
    assert ops == ["Reshape", "Mul"], ops  # Shape, Size and the target chain folded without allocating
    values = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}
    assert [BIG, 12] in [v.tolist() for v in values.values()]
    assert float(BIG * 12) in [float(v) for v in values.values() if v.size == 1]


def test_size_beyond_int64_is_not_folded():
    graph, _, _ = _fold(_dims_model(2**62))
    assert any(n.op == "Size" for n in graph.nodes)  # 2**62 * 12 does not fit an int64


@pytest.mark.parametrize("dim", [-1, -7])
def test_negative_declared_dim_is_dynamic(dim):
    from gsrewrite.pipelines import simplify

    result = simplify(_dims_model(dim), validate=False)
    ops = [n.op_type for n in result.model.graph.node]
    assert "Size" in ops and "Reshape" in ops  # the size is unknown: not folded, not negative
    target = next(numpy_helper.to_array(t) for t in result.model.graph.initializer if t.dims == [2])
    assert target.tolist() == [0, 12]  # "keep the input's dim": the dim stays dynamic
    assert result.model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == dim


# --- the CLI, capped at 4 GiB ---------------------------------------------------------------------------------
def _bombs_model() -> onnx.ModelProto:
    """Several blow-ups in one model, each feeding the graph output through an Add with the input."""
    cases = [("ConstantOfShape", [np.array([BIG], I64)], {}), ("Expand", [_ones(1), np.array([BIG], I64)], {}),
             ("Tile", [_ones(1), np.array([BIG], I64)], {}),
             ("Range", [np.array(0, F32), np.array(float(BIG), F32), np.array(1, F32)], {}),
             ("Pad", [_ones(1), np.array([0, BIG], I64)], {}),
             ("OneHot", [np.array([0], I64), np.array(BIG, I64), np.array([0, 1], F32)], {}),
             ("Resize", [_ones(1, 1, 1, 1), None, np.array([1, 1, 2**20, 2**20], F32)], {})]
    nodes, inits, total = [], [], "x"
    for k, (op, inputs, attrs) in enumerate(cases):
        names = [f"c{k}_{i}" if v is not None else "" for i, v in enumerate(inputs)]
        inits += [numpy_helper.from_array(v, n) for n, v in zip(names, inputs, strict=True) if n]
        nodes += [helper.make_node(op, names, [f"b{k}"], name=f"bomb{k}", **attrs),
                  helper.make_node("ReduceMax", [f"b{k}"], [f"m{k}"], keepdims=0),
                  helper.make_node("Add", [total, f"m{k}"], [f"t{k}"])]
        total = f"t{k}"
    nodes.append(helper.make_node("Identity", [total], ["y"]))
    graph = helper.make_graph(nodes, "bombs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _mul_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Mul", ["a", "b"], ["c"], name="outer"),
                               helper.make_node("Add", ["c", "x"], ["y"])], "mul", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(_ones(65536, 1), "a"),
                                           numpy_helper.from_array(_ones(1, 65536), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _concat_doubling_model() -> onnx.ModelProto:
    """Concat of a constant with itself 32 times (2**32 floats): ONNX data propagation would build it."""
    nodes = [helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0) for i in range(32)]
    nodes += [helper.make_node("ReduceMax", ["c32"], ["m"], keepdims=0), helper.make_node("Add", ["x", "m"], ["y"])]
    graph = helper.make_graph(nodes, "doubling", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                              initializer=[numpy_helper.from_array(_ones(1), "c0")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _declared_vector_model() -> onnx.ModelProto:
    """Add of a declared FLOAT[2**34] input and a scaled shape: ONNX data propagation needs tens of GB for it."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "k"], ["n"]),
             helper.make_node("ConstantOfShape", ["n"], ["z"]), helper.make_node("Add", ["z", "w"], ["zw"]),
             helper.make_node("Add", ["x", "v"], ["y"]), helper.make_node("ReduceMax", ["zw"], ["m"], keepdims=0),
             helper.make_node("Add", ["y", "m"], ["out"])]
    graph = helper.make_graph(nodes, "vector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2**34]),
                                                helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(_ones(1), "v"),
                                           numpy_helper.from_array(np.array([1], I64), "k")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _run_capped(tmp_path: Path, *args: str) -> tuple[int, str, int, float]:
    """Run the console script under a 4 GiB address-space cap: (exit code, stderr, peak RSS in bytes, CPU seconds)."""
    done = measured_run([GSREWRITE, *args], cwd=tmp_path, preexec_fn=_cap_memory)
    assert not done.hung, done.stderr
    return done.returncode, done.stderr, done.max_rss, done.cpu_s


@pytest.mark.parametrize("build", [_bombs_model, _mul_model, lambda: _dims_model(BIG), lambda: _dims_model(-1),
                                   _concat_doubling_model, _declared_vector_model],
                         ids=["bombs", "mul-16GB", "dim-2**40", "dim-negative", "concat-doubling", "declared-vector"])
def test_cli_simplify_stays_small(tmp_path, build):
    model = tmp_path / "model.onnx"
    onnx.save(build(), model)
    code, stderr, peak, cpu = _run_capped(tmp_path, "-v", "simplify", "--no-validate", str(model),
                                          "-o", str(tmp_path / "out.onnx"))
    assert code == 0, stderr
    assert "internal error" not in stderr
    assert peak < 1 << 30, f"peak RSS {peak:,} bytes"
    assert cpu < 20, f"{cpu:.1f} s of CPU"  # about 1.5 s; CPU, not wall time: the same on a loaded machine
    out = onnx.load(tmp_path / "out.onnx")
    assert max((numpy_helper.to_array(t).nbytes for t in out.graph.initializer), default=0) <= 1 << 20


def test_cli_reports_skipped_folds_in_the_log(tmp_path):
    model = tmp_path / "model.onnx"
    onnx.save(_mul_model(), model)
    code, stderr, _, _ = _run_capped(tmp_path, "-v", "simplify", "--no-validate", str(model),
                                     "-o", str(tmp_path / "out.onnx"))
    assert code == 0, stderr
    assert "not folding outer (Mul)" in stderr and OVER in stderr


def test_cli_huge_sparse_constant_is_a_clean_error(tmp_path):
    """A sparse initializer of dims [2**40] is never densified: exit 2 and one line, no allocation."""
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0], F32), "w"),
                                       numpy_helper.from_array(np.array([1], I64), "w_idx"), [BIG])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "sparse",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BIG])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BIG])])
    graph.sparse_initializer.append(sparse)
    model = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    code, stderr, peak, _ = _run_capped(tmp_path, "simplify", "--no-validate", str(model),
                                        "-o", str(tmp_path / "out.onnx"))
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "sparse constant 'w'" in stderr and peak < 1 << 30


def test_slice_of_a_negative_declared_dim_is_not_a_noop():
    """Slice(x, 0, 0) on a dim declared -1 is empty, not the whole of x (-1 is unknown, not a size)."""
    from gsrewrite.pipelines import simplify

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3])
    nodes = [helper.make_node("Slice", ["x", "zero", "zero", "zero"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], I64), "zero")]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3])],
                              initializer=inits)
    result = simplify(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), validate=False)
    assert [n.op_type for n in result.model.graph.node] == ["Slice"]


def test_simplify_reports_the_folds_it_skipped(tmp_path):
    """The library result and the CLI's report say which fold was skipped and why."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from gsrewrite.pipelines import simplify

    shape = numpy_helper.from_array(np.array([1 << 20, 1 << 20], dtype=np.int64), "s")
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"]),
             helper.make_node("ReduceSum", ["c"], ["r"], keepdims=0),
             helper.make_node("Add", ["x", "r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializer=[shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = simplify(model, validate=False)
    (why,) = result.skipped_folds.values()
    assert "4,398,046,511,104 bytes" in why and "max-fold-bytes" in why
