"""The residual + LayerNorm forms on onnxruntime's CPU: why ``--device cpu`` writes Sum + LayerNormalization.

One post-LN residual block, ``LayerNormalization(x + bias + skip)`` over [batch, seq, hidden], in four forms:

* ``SkipLayerNormalization``  the com.microsoft op (``--device gpu``; what the transformers optimizer writes);
* ``Add + Add + LayerNorm``   the exporter's form, unfused;
* ``Sum + LayerNorm``         what ``skip-layernorm-sum`` writes (``--device cpu``);

each run in onnxruntime (1 thread) with its graph optimizations disabled (ORT_DISABLE_ALL) and enabled
(ORT_ENABLE_ALL: onnxruntime then fuses Add + Add + LayerNormalization into SkipLayerNormalization itself, and
the table says which op it ran). All sessions run in interleaved rounds in one process, so a load change hits
every cell alike; each cell is the median of ``--runs`` calls. Writes benchmarks/results/norm_kernels.md.

    python benchmarks/norm_kernels.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import _markdown as md
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
SHAPES = ((2, 16, 128), (1, 128, 768), (8, 128, 768))
LEVELS = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "enabled": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
EPS = 1e-12


def forms(hidden: int) -> dict[str, list[onnx.NodeProto]]:
    ln = {"axis": -1, "epsilon": EPS}
    return {
        "SkipLayerNormalization": [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                                                    ["y"], domain="com.microsoft", epsilon=EPS)],
        "Add + Add + LayerNorm": [helper.make_node("Add", ["x", "bias"], ["t"]),
                                  helper.make_node("Add", ["t", "skip"], ["s"]),
                                  helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], **ln)],
        "Sum + LayerNorm": [helper.make_node("Sum", ["x", "bias", "skip"], ["s"]),
                            helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], **ln)],
    }


def model(nodes: list[onnx.NodeProto], hidden: int, inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    dims = ["batch", "seq", hidden]  # dynamic like an export: onnxruntime's fusion accepts it
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims)
                                               for n in ("x", "skip")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17),
                                                                 helper.make_opsetid("com.microsoft", 1)])


def session(proto: onnx.ModelProto, level: ort.GraphOptimizationLevel, folder: Path) -> tuple[ort.InferenceSession,
                                                                                               list[str]]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = level
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    options.log_severity_level = 3
    sess = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess, [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES:
            feeds = {n: rng.normal(size=shape).astype(np.float32) for n in ("x", "skip")}
            inits = [numpy_helper.from_array(rng.normal(size=shape[-1]).astype(np.float32), name)
                     for name in ("gamma", "beta", "bias")]
            cells: dict[tuple[str, str], tuple[ort.InferenceSession, list[str]]] = {}
            for name, nodes in forms(shape[-1]).items():
                proto = model(nodes, shape[-1], inits)
                for mode, level in LEVELS.items():
                    cells[(name, mode)] = session(proto, level, Path(tmp))
            reference = cells[("Add + Add + LayerNorm", "disabled")][0].run(None, feeds)[0]
            times: dict[tuple[str, str], list[float]] = {key: [] for key in cells}
            order = list(cells.items())
            shuffle = random.Random(0)
            for _ in range(args.runs):
                shuffle.shuffle(order)
                for key, (sess, _ops) in order:
                    start = time.perf_counter()
                    sess.run(None, feeds)
                    times[key].append(time.perf_counter() - start)
            base = statistics.median(times[("SkipLayerNormalization", "enabled")])
            for (name, mode), (sess, ops) in cells.items():
                median = statistics.median(times[(name, mode)])
                diff = float(np.abs(sess.run(None, feeds)[0] - reference).max())
                rows.append(["x".join(map(str, shape)), name, mode, " + ".join(ops), md.seconds(median),
                             md.ratio(median / base), md.sci(diff)])
                print(" | ".join(str(cell) for cell in rows[-1]))
    text = "\n".join([
        "# Residual + LayerNorm forms on onnxruntime's CPU (benchmarks/norm_kernels.py)", "",
        md.machine_line(), f"onnxruntime {ort.__version__}, 1 thread, median of {args.runs} interleaved runs; "
        "ratio: to SkipLayerNormalization with optimizations enabled; max abs diff: to the unfused form.", "",
        md.table(["shape", "form", "ORT optimizations", "ops onnxruntime ran", "time", "ratio", "max abs diff"], rows),
        "",
    ])
    out = HERE / "results" / "norm_kernels.md"
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
