"""Pre-LN residual + RMSNorm on onnxruntime's CPU: Add + SimplifiedLayerNormalization or the Skip op.

A LLaMA block's residual: ``s = x + skip``, ``y = RMSNorm(s)``, and ``s`` is also the next residual. The builder of
onnxruntime-genai writes SkipSimplifiedLayerNormalization (``y`` and the sum as its fourth output); gsrewrite keeps
Add + SimplifiedLayerNormalization (onnxruntime does not fuse them: the sum has two readers). Here ``--layers``
such residuals in a chain (each next input ``y * s``, so both outputs are read), at decode shapes [1, 1, hidden]
and prefill shapes [1, 128, hidden] of SmolLM2 (576) and the base-width LLaMA (1024); 1 intra-op thread,
ORT_ENABLE_ALL, both forms interleaved, thread CPU time per layer (min and median of ``--runs``). Writes
benchmarks/results/skip_rmsnorm_kernels.md.

    .venv/bin/python benchmarks/skip_rmsnorm_kernels.py [--runs 300]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path

import _markdown as md
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

log = logging.getLogger("skip_rmsnorm_kernels")
HERE = Path(__file__).resolve().parent
SHAPES = ((1, 1, 576), (1, 1, 1024), (1, 128, 576), (1, 128, 1024))
FORMS = ("Add + SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization")


def session(form: str, shape: tuple[int, ...], layers: int) -> ort.InferenceSession:
    hidden, rng = shape[-1], np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        gamma = f"g{i}"
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, hidden).astype(np.float32), gamma))
        if form == FORMS[0]:
            nodes += [helper.make_node("Add", [x, "skip"], [f"s{i}"]),
                      helper.make_node("SimplifiedLayerNormalization", [f"s{i}", gamma], [f"y{i}"], axis=-1,
                                       epsilon=1e-5)]
        else:
            nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", [x, "skip", gamma],
                                          [f"y{i}", "", "", f"s{i}"], domain="com.microsoft", epsilon=1e-5))
        nodes.append(helper.make_node("Mul", [f"y{i}", f"s{i}"], [f"x{i}"]))
        x = f"x{i}"
    dims = ["batch", "seq", hidden]
    graph = helper.make_graph(nodes, "residuals", [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims)
                                                   for n in ("x", "skip")],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, dims)], inits)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--layers", type=int, default=30)
    args = parser.parse_args()
    rows = []
    for shape in SHAPES:
        rng = np.random.default_rng(1)
        feeds = {"x": rng.uniform(-1, 1, shape).astype(np.float32),
                 "skip": rng.uniform(-0.01, 0.01, shape).astype(np.float32)}
        sessions = {form: session(form, shape, args.layers) for form in FORMS}
        outputs = {form: s.run(None, feeds)[0] for form, s in sessions.items()}
        times: dict[str, list[float]] = {form: [] for form in FORMS}
        for _ in range(args.runs):
            for form, sess in sessions.items():
                start = time.thread_time()
                sess.run(None, feeds)
                times[form].append((time.thread_time() - start) / args.layers)
        base = min(times[FORMS[0]])
        diff = float(np.abs(outputs[FORMS[0]] - outputs[FORMS[1]]).max() / np.abs(outputs[FORMS[0]]).max())
        for form in FORMS:
            rows.append(["x".join(map(str, shape)), form, md.seconds(min(times[form])),
                         md.seconds(statistics.median(times[form])), md.ratio(min(times[form]) / base),
                         md.sci(diff) if form == FORMS[1] else "0"])
            log.info(" | ".join(str(c) for c in rows[-1]))
    text = "\n".join([
        "# Pre-LN residual + RMSNorm forms on onnxruntime's CPU (benchmarks/skip_rmsnorm_kernels.py)", "",
        md.machine_line(), f"1 thread, {args.layers} residuals in a chain, thread CPU time per residual (min and "
        f"median of {args.runs} interleaved runs); ratio: min to Add + SimplifiedLayerNormalization's; diff: largest "
        "|difference| of the chain's output relative to its largest value.", "",
        md.table(["shape", "form", "min", "median", "ratio", "relative diff"], rows), "",
    ])
    out = HERE / "results" / "skip_rmsnorm_kernels.md"
    out.write_text(text, encoding="utf-8")
    log.info("wrote %s", out)


if __name__ == "__main__":
    main()
