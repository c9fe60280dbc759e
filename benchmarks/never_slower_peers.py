"""optimize's output next to its input and the peers' outputs, and against the MatMul floor (issue 17).

    .venv/bin/python benchmarks/never_slower_peers.py bert.legacy14 gpt2.dynamo ... [--runs 20]

Per base-width export (benchmarks/_work/base/NAME.onnx): the original; ``gsrewrite optimize`` (default); onnxsim;
onnxslim; onnxruntime's transformers optimizer (``optimize_model``, model type by name, its default fusions);
timed with ``gsrewrite.pipelines.bench`` (onnxruntime CPU, ORT_ENABLE_ALL, 1 thread, min of interleaved runs) at
validation's sample size. The MatMul floor: the model's MatMul/Gemm MACs (``gsrewrite.profile``) at onnxruntime's
single-thread MatMul throughput measured here on a [256, 768] x [768, 3072] product.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.pipelines.bench import bench, bench_inputs, session

BASE = Path(__file__).resolve().parent / "_work" / "base"


def matmul_throughput(runs: int = 30) -> float:
    """MACs per second of one onnxruntime MatMul on one thread."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((768, 3072)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 768])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    sess = session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), 1, "all")
    x = rng.standard_normal((256, 768)).astype(np.float32)
    best = min(_time(sess, {"x": x}) for _ in range(runs))
    return 256 * 768 * 3072 / best


def _time(sess, feed) -> float:
    start = time.perf_counter()
    sess.run(feed)
    return time.perf_counter() - start


def peers(name: str, model: onnx.ModelProto, folder: str) -> list[tuple[str, onnx.ModelProto]]:
    out: list[tuple[str, onnx.ModelProto]] = []
    try:
        import onnxsim

        simplified, _ = onnxsim.simplify(model)
        out.append(("onnxsim", simplified))
    except Exception as exc:  # a peer failing is a result
        print(f"<!-- onnxsim failed on {name}: {exc} -->", file=sys.stderr)
    try:
        import onnxslim

        out.append(("onnxslim", onnxslim.slim(model)))
    except Exception as exc:
        print(f"<!-- onnxslim failed on {name}: {exc} -->", file=sys.stderr)
    kind = next((k for k in ("bert", "gpt2", "vit") if name.startswith(k)), None)
    made = BASE.parent / "peers" / f"{name}.ortopt.onnx"  # benchmarks/make_ort_optimized.py (needs torch)
    if made.exists():
        out.append(("ort transformers optimizer", onnx.load(made)))
    elif kind is not None:
        try:
            from onnxruntime.transformers.optimizer import optimize_model

            path = Path(folder, "in.onnx")
            onnx.save(model, path)
            optimized = optimize_model(str(path), model_type=kind, num_heads=12, hidden_size=768, opt_level=1)
            out.append(("ort transformers optimizer", optimized.model))
        except Exception as exc:
            print(f"<!-- transformers optimizer failed on {name}: {exc} -->", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    throughput = matmul_throughput()
    print(f"onnxruntime single-thread MatMul throughput here: {throughput / 1e9:.1f} GMAC/s\n")
    print("| model | original ms | gsrewrite optimize | onnxsim | onnxslim | ort transformers optimizer | "
          "MatMul floor ms | optimize / floor |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        original = onnx.load(BASE / f"{name}.onnx")
        with tempfile.TemporaryDirectory() as folder:
            candidates = [("original", original), ("gsrewrite optimize",
                                                   gsrewrite.optimize(original, validate=False).model)]
            candidates += peers(name, original, folder)
        feed = bench_inputs(original)
        timed = {t.model: t.min_ms for t in bench(candidates, runs=args.runs, inputs=feed).timings}
        bindings = {}
        shapes = gsrewrite.infer_shapes(original)
        for key, array in feed.items():
            for dim, size in zip(shapes.shape(key) or (), array.shape, strict=False):
                if not isinstance(dim, int) and dim is not None and len(dim.symbols()) == 1:
                    bindings[next(iter(dim.symbols()))] = int(size)
        by_type = gsrewrite.profile(original, [f"{k}={v}" for k, v in bindings.items()]).by_op_type()
        matmul_macs = sum(v.macs for k, v in by_type.items() if k in ("MatMul", "Gemm") and isinstance(v.macs, int))
        floor = matmul_macs / throughput * 1000
        base = timed["original"]

        cells = {label: f"{timed[label] / base:.3f}x" if label in timed else "fails"
                 for label in ("gsrewrite optimize", "onnxsim", "onnxslim", "ort transformers optimizer")}
        print(f"| {name} | {base:.1f} | {cells['gsrewrite optimize']} | {cells['onnxsim']} | {cells['onnxslim']} | "
              f"{cells['ort transformers optimizer']} | {floor:.1f} | {timed['gsrewrite optimize'] / floor:.2f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
