"""profile and memory side by side with onnx-tool 1.0.x on the same models: total MACs, wall time, memory arena.

    .venv/bin/python benchmarks/profile_vs_onnx_tool.py MODEL.onnx... [--batch 2 --seq 16] > results/profile.md

Both tools get the same concrete input sizes (onnx-tool needs them). Wall time: min of --runs (7) runs each,
interleaved, in this process (loading included for both; onnx-tool's compress_memory is not in its time, our
profile does not plan memory). Also times gsrewrite with ``sparsity=False`` (no weight read: onnx-tool reads and
scans every weight, so the first ratio is the like-for-like one) and checks that optimize's output has the same
total.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

import numpy as np
import onnx

import gsrewrite
from gsrewrite.graph.symbolic_shapes import parse_input_shapes


def _inputs(model: onnx.ModelProto, batch: int, seq: int) -> dict[str, np.ndarray]:
    init = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else (batch if i == 0 else seq)
                for i, d in enumerate(vi.type.tensor_type.shape.dim)]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        feeds[vi.name] = np.zeros(dims, dtype=dtype)
    return feeds


def onnx_tool_run(path: str, feeds: dict[str, np.ndarray]) -> tuple[float | None, int | None, str, float]:
    """(MACs, arena, status, seconds of the profile: load, shape inference and profile, not compress_memory)."""
    import onnx_tool

    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            model = onnx_tool.Model(path)
            graph = model.graph
            graph.shape_infer(feeds)
            graph.profile()
            seconds = time.perf_counter() - start
            arena = None
            try:
                _, compressed = graph.compress_memory()  # (offsets, arena bytes)
                arena = int(compressed)
            except Exception:  # onnx-tool's own failure is a result
                arena = None
        return float(graph.macs[0]), arena, "ok", seconds
    except Exception as exc:
        return None, None, f"fails: {type(exc).__name__}: {str(exc).splitlines()[0][:60] if str(exc) else ''}", \
            time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--runs", type=int, default=7, help="interleaved runs per tool (the min is kept)")
    args = parser.parse_args()
    print("| model | gsrewrite MACs | onnx-tool MACs | ratio | gsrewrite s | onnx-tool s | time ratio | "
          "gsrewrite --no-sparsity s (ratio) | arena / lower bound | onnx-tool arena | optimize total / original |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.models:
        model = onnx.load(path)
        feeds = _inputs(model, args.batch, args.seq)
        bindings = {}
        shapes = gsrewrite.infer_shapes(model)
        for name, array in feeds.items():
            for dim, size in zip(shapes.shape(name) or (), array.shape, strict=False):
                if not isinstance(dim, int) and dim is not None and len(dim.symbols()) == 1:
                    bindings[next(iter(dim.symbols()))] = size
        given = parse_input_shapes([f"{k}={v}" for k, v in bindings.items()])
        ours_t, light_t, theirs_t = [], [], []
        ours = theirs = arena = None
        status = "ok"
        for _ in range(args.runs):  # interleaved: ours, onnx-tool, ours without reading the weights
            start = time.perf_counter()
            ours = gsrewrite.profile(path, given)
            ours_t.append(time.perf_counter() - start)
            theirs, arena, status, seconds = onnx_tool_run(path, feeds)
            theirs_t.append(seconds)
            start = time.perf_counter()
            gsrewrite.profile(path, given, sparsity=False)
            light_t.append(time.perf_counter() - start)
        assert ours is not None
        macs = ours.macs
        plan = gsrewrite.plan_memory(path, given)
        optimized = gsrewrite.optimize(model, validate=False) if hasattr(gsrewrite, "optimize") else None
        fused = gsrewrite.profile(optimized.model, given).macs if optimized is not None else None
        ratio = f"{macs / theirs:.4f}" if theirs else status
        fused_ratio = f"{fused / macs:.4f}" if isinstance(fused, int) and isinstance(macs, int) and macs else "?"
        print(f"| {Path(path).name} | {macs:,} | {f'{theirs:,.0f}' if theirs else status} | {ratio} | "
              f"{min(ours_t):.3f} | {min(theirs_t):.3f} | {min(ours_t) / min(theirs_t):.2f} | "
              f"{min(light_t):.3f} ({min(light_t) / min(theirs_t):.2f}) | "
              f"{plan.ratio_to_bound:.3f} ({plan.arena_bytes:,} B) | "
              f"{f'{arena:,} B (ours {plan.arena_bytes / arena:.2f}x)' if arena else '?'} | {fused_ratio} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
