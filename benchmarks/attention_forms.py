"""Which emitted attention form is fastest on CPU? optimize's output with each fusion family on and off, timed
side by side with the original (onnxruntime CPU, all its graph optimizations, 1 thread, interleaved runs, min).

    python benchmarks/attention_forms.py bert.legacy14_dyn gpt2.legacy14_dyn --runs 20

Variants: ``original``; ``default`` (optimize as shipped); ``no-packing`` (Q/K/V stay separate MatMuls feeding
MultiHeadAttention: the attention-packing* and *-mask-index patterns off); ``no-attention`` (the mha family off);
``none`` (simplify only). Writes the optimized models to benchmarks/_work/forms/ and prints a table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
BASE = HERE / "_work" / "base"
OUT = HERE / "_work" / "forms"


def variants() -> dict[str, list[str] | None]:
    from gsrewrite.patterns import default_registry

    names = [p.name for p in default_registry().patterns]
    packing = {n for n in names if n.startswith("attention-")}
    mha = {p.name for p in default_registry().patterns if p.family == "mha"}
    return {"default": ["all"], "no-packing": [n for n in names if n not in packing],
            "no-attention": [n for n in names if n not in mha], "none": None}


def build(model: str) -> dict[str, Path]:
    import gsrewrite

    OUT.mkdir(parents=True, exist_ok=True)
    paths = {"original": BASE / f"{model}.onnx"}
    for name, patterns in variants().items():
        path = OUT / f"{model}.{name}.onnx"
        if not path.exists():
            if patterns is None:
                result = gsrewrite.simplify(str(paths["original"]))
            else:
                result = gsrewrite.optimize(str(paths["original"]), patterns=patterns)
            gsrewrite.save_model(result.model, path)
        paths[name] = path
    return paths


def session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def measure(paths: dict[str, Path], feeds: dict[str, np.ndarray], runs: int, threads: int) -> dict[str, float]:
    sessions = {name: session(path, threads) for name, path in paths.items()}
    for s in sessions.values():
        for _ in range(3):
            s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()})
    times: dict[str, list[float]] = {name: [] for name in sessions}
    order = list(sessions)
    for r in range(runs):
        for name in order[r % len(order):] + order[:r % len(order)]:
            s = sessions[name]
            feed = {i.name: feeds[i.name] for i in s.get_inputs()}
            start = time.perf_counter()
            s.run(None, feed)
            times[name].append(time.perf_counter() - start)
    return {name: min(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    for model in args.models:
        paths = build(model)
        feeds = dict(np.load(BASE / f"{model}.inputs.npz"))
        best = measure(paths, feeds, args.runs, args.threads)
        base = best["original"]
        print(f"{model}: min of {args.runs} interleaved runs, {args.threads} thread(s)")
        for name, seconds in best.items():
            print(f"  {name:14} {seconds * 1e3:8.1f} ms  {seconds / base:6.3f}x")


if __name__ == "__main__":
    main()
