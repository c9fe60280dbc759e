"""Decoders with a KV cache, side by side with the peers: decode steps and a prefill, fp32 and int4.

    .venv/bin/python benchmarks/decode_vs_peers.py benchmarks/_work/base_kv/gpt2.dynamo_kv.onnx ... \
        [--past 128 1024] [--runs 15] [--work DIR] [--profile] > benchmarks/results/decode.md

Per model (base-width KV-cache exports: ``benchmarks/make_base_width.py --kv``):

* fp32: the original; ``gsrewrite optimize``; onnxruntime's transformers optimizer (``model_type gpt2``, heads and
  hidden size given: onnxruntime has no LLaMA type in it); onnxscript's ``optimize_for_ort``. Each peer runs in its
  own process (a crash is a result).
* int4 (block 32, symmetric): onnxruntime's ``MatMulNBitsQuantizer`` (its defaults otherwise) on the original and on
  gsrewrite's fused output; ``gsrewrite compress int4`` on the original; ``gsrewrite optimize --compress int4``
  (fusions, then int4, validated against the original).
  gsrewrite's tolerance is relaxed (``--min-top1 0 --min-cosine 0.5``): random-weight logits over a 32-50k vocabulary
  are near ties, so their top-1 class under int4 is noise, and the cosine is what the table compares with
  onnxruntime's quantizer.
* Latency: ``gsrewrite bench``'s library call, batch 1, 1 thread, onnxruntime ORT_ENABLE_ALL, every variant's
  session open and the runs interleaved, min and median of ``--runs``, at decode steps (1 new token over each
  ``--past``) and a prefill (128 tokens, no past).
* Agreement: every output against the fp32 original on the first decode-step feed: max abs difference and the
  cosine of the logits. Fused ops: the contrib and fused op types each variant's graph holds.
* ``--profile``: onnxruntime's profiler on the first decode step (1 thread): the time per op type, mean of the
  profiled runs, for the original, gsrewrite's fused fp32 and both int4 variants built from the original's layout.

Variants are kept in ``--work`` and reused when present (delete them to remake).
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _isolate

from gsrewrite.pipelines.bench import bench, decoder_phases

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
#: gsrewrite's int4 tolerance here (see the module): top-1 is noise on random weights
RELAXED = ("--min-top1", "0", "--min-cosine", "0.5")
#: op types counted as fusions in the table (the rest are the exporters' own)
FUSED = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding", "SkipLayerNormalization",
         "SkipSimplifiedLayerNormalization", "LayerNormalization", "SimplifiedLayerNormalization", "FastGelu",
         "BiasGelu", "Gelu", "QuickGelu", "MatMulNBits", "GemmFastGelu", "BiasSplitGelu")


def _gsrewrite(*args: str) -> str:
    done = subprocess.run([str(GSREWRITE), *args], capture_output=True, text=True, timeout=3600)
    return "" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1][:200]}"


def _hints(path: Path) -> dict[str, Any]:
    """The transformers optimizer needs the head count and hidden size: read off the present's shape."""
    model = onnx.load(path, load_external_data=False)
    present = next(o for o in model.graph.output if o.name.startswith("present"))
    dims = [d.dim_value for d in present.type.tensor_type.shape.dim]
    hidden = next(i for i in model.graph.initializer if i.name.endswith("norm.weight") or "ln_1.weight" in i.name)
    return {"model_type": "gpt2", "num_heads": int(hidden.dims[0]) // dims[3], "hidden_size": int(hidden.dims[0])}


def _ort_int4(src: Path, out: Path) -> str:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    if not src.exists():
        return f"{src.name} was not made"
    model = onnx.load(src)
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)
    return ""


def _session(path: Path, threads: int, profile: str | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _run(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = _session(path, 2)
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    return dict(zip(names, session.run(None, {k: v for k, v in feed.items() if k in wanted}), strict=True))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _fused(path: Path) -> str:
    """The fused op types the graph holds, with their counts."""
    counts = collections.Counter(n.op_type for n in onnx.load(path, load_external_data=False).graph.node
                                 if n.op_type in FUSED)
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "none"


def _made(out: Path, make: Any) -> tuple[str, float]:
    """Make ``out`` unless it exists: (the maker's error note or "", seconds; 0 when reused)."""
    if out.exists():
        return "", 0.0
    start = time.perf_counter()
    try:
        note = make()
    except Exception as exc:  # the maker's own failure is a result
        note = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    if note and out.exists():
        out.unlink()
    return note, time.perf_counter() - start


def variants(src: Path, work: Path) -> list[tuple[str, Path, str, float]]:
    """(label, path, error note, seconds to make) for every variant; a failed one keeps its note, no file."""
    made: list[tuple[str, Path, str, float]] = [("fp32 original", src, "", 0.0)]
    stem, hints = src.stem, _hints(src)

    def peer(name: str, out: Path) -> Any:
        return lambda: _isolate.run("tool", [name, str(src), str(out), json.dumps(hints)],
                                    timeout=1800).get("error", "")

    fused = work / f"{stem}.gsrewrite.onnx"
    plan = [
        ("gsrewrite optimize", fused, lambda: _gsrewrite("optimize", str(src), str(fused), "-q")),
        ("onnxruntime transformers optimizer", work / f"{stem}.ort-transformers.onnx",
         peer("ort-transformers-hinted", work / f"{stem}.ort-transformers.onnx")),
        ("onnxscript optimize_for_ort", work / f"{stem}.onnxscript.onnx",
         peer("onnxscript", work / f"{stem}.onnxscript.onnx")),
        ("onnxruntime MatMulNBits int4", work / f"{stem}.ort-int4.onnx",
         lambda: _ort_int4(src, work / f"{stem}.ort-int4.onnx")),
        ("gsrewrite compress int4", work / f"{stem}.int4.onnx",
         lambda: _gsrewrite("compress", str(src), str(work / f"{stem}.int4.onnx"), "-s", "int4", *RELAXED,
                            "--bench-runs", "0", "-q")),
        ("gsrewrite optimize --compress int4", work / f"{stem}.optimize-int4.onnx",
         lambda: _gsrewrite("optimize", str(src), str(work / f"{stem}.optimize-int4.onnx"), "--compress", "int4",
                            *RELAXED, "-q")),
        # the same quantizer on the same fused graph: the cosine of the two quantizers side by side
        ("onnxruntime MatMulNBits int4 of gsrewrite optimize", work / f"{stem}.gsrewrite.ort-int4.onnx",
         lambda: _ort_int4(fused, work / f"{stem}.gsrewrite.ort-int4.onnx")),
    ]
    for label, out, make in plan:
        note, seconds = _made(out, make)
        made.append((label, out, note, seconds))
    return made


def op_times(path: Path, feed: dict[str, np.ndarray], runs: int) -> dict[str, float]:
    """Milliseconds per op type of one run (per op type, the min over the last ``runs`` of ``2 + runs`` profiled
    runs: the machine is shared), from onnxruntime's profiler, 1 thread."""
    with tempfile.TemporaryDirectory(prefix="decode-profile-") as folder:
        session = _session(path, 1, profile=str(Path(folder) / "p"))
        wanted = {i.name for i in session.get_inputs()}
        given = {k: v for k, v in feed.items() if k in wanted}
        for _ in range(2 + runs):
            session.run(None, given)
        events = json.loads(Path(session.end_profiling()).read_text())
    per_run: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    run = 0
    for event in events:  # a run's node events come before its model_run event
        if event.get("cat") == "Session" and event.get("name") == "model_run":
            run += 1
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            per_run[run][event["args"]["op_name"]] += event["dur"] / 1000
    kept = [per_run[k] for k in sorted(per_run)[-runs:]]
    ops = {op for times in kept for op in times}
    best = {op: min(times.get(op, 0.0) for times in kept) for op in ops}
    return dict(sorted(best.items(), key=lambda item: -item[1]))


def report(src: Path, pasts: list[int], runs: int, work: Path, profile: bool) -> list[str]:
    made = variants(src, work)
    original = onnx.load(src, load_external_data=False)
    phases = {}
    for past in pasts:
        found = decoder_phases(original, {"batch": 1}, past=past, new_tokens=128)
        assert found is not None, f"{src} has no KV cache"
        phases[f"decode, past {past}"] = found[0]
        phases.setdefault("prefill, 128 tokens", found[1])
    first = phases[f"decode, past {pasts[0]}"].feed
    reference = _run(src, first)
    outputs: dict[str, dict[str, np.ndarray]] = {}
    notes = {}
    for label, path, note, _ in made:
        if note or not path.exists():
            notes[label] = note or "not written"
            continue
        try:
            outputs[label] = _run(path, first)
        except Exception as exc:  # a peer's output that onnxruntime refuses is a result
            notes[label] = f"onnxruntime will not run it: {str(exc).splitlines()[0][:200]}"
    ok = [(label, path) for label, path, _, _ in made if label in outputs]
    lines = [f"## {src.name}", ""]
    lines += ["| variant | made in s | note |", "|---|---|---|"]
    for label, _, _, seconds in made:
        note = notes.get(label) or ("reused" if not seconds and label != "fp32 original" else "")
        lines.append(f"| {label} | {seconds:.0f} | {note} |")
    lines.append("")
    rows = {}
    for label, path in ok:
        got = outputs[label]
        worst = max(float(np.abs(got[k] - v).max()) for k, v in reference.items() if k in got)
        rows[label] = [label, f"{path.stat().st_size / 1e6:.0f}", _fused(path), f"{worst:.2e}",
                       f"{_cosine(got['logits'], reference['logits']):.6f}"]
    header = ["variant", "MB", "fused ops", f"max abs vs fp32 (decode, past {pasts[0]})", "logits cosine"]
    for name in phases:
        header += [f"{name}: min (median) ms", "ratio", "tokens/s"]
    for phase in phases.values():
        timed = bench([(label, str(path)) for label, path in ok], runs=runs, warmup=2, threads=1, inputs=phase.feed)
        base = timed.timings[0].min_ms
        for (label, _), timing in zip(ok, timed.timings, strict=True):
            rows[label] += [f"{timing.min_ms:.2f} ({timing.median_ms:.2f})", f"{timing.min_ms / base:.3f}",
                            f"{phase.tokens / (timing.min_ms / 1000):.1f}"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(row) + " |" for row in rows.values()]
    lines.append("")
    if profile:
        lines += _profile_lines(ok, first, pasts[0])
    return lines


def _profile_lines(ok: list[tuple[str, Path]], feed: dict[str, np.ndarray], past: int) -> list[str]:
    chosen = [(label, path) for label, path in ok if label in (
        "fp32 original", "gsrewrite optimize", "onnxruntime transformers optimizer", "onnxruntime MatMulNBits int4",
        "gsrewrite optimize --compress int4")]
    times = {label: op_times(path, feed, 10) for label, path in chosen}
    ops = sorted({op for t in times.values() for op in t}, key=lambda op: -max(t.get(op, 0.0) for t in times.values()))
    lines = [f"Per op type, decode step (past {past}), onnxruntime profiler, 1 thread, ms per run (min of 10 per op "
             "type; total: their sum):", "",
             "| op type | " + " | ".join(label for label, _ in chosen) + " |", "|---|" + "---|" * len(chosen)]
    lines += ["| total | " + " | ".join(f"{sum(times[label].values()):.2f}" for label, _ in chosen) + " |"]
    for op in ops:
        cells = [f"{times[label][op]:.3f}" if op in times[label] else "" for label, _ in chosen]
        if max(times[label].get(op, 0.0) for label, _ in chosen) >= 0.02:
            lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    import logging

    logging.getLogger("onnxruntime").setLevel(logging.WARNING)  # the quantizer's per-node INFO lines
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--past", nargs="+", type=int, default=[128, 1024])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--work", type=Path, default=None, help="keep the variants here (default: a temp folder)")
    parser.add_argument("--profile", action="store_true", help="also the time per op type at the first decode step")
    args = parser.parse_args(argv)
    print("# Decoders with a KV cache: decode and prefill latency, side by side (benchmarks/decode_vs_peers.py)\n")
    print(f"Batch 1, 1 thread, ORT_ENABLE_ALL, min (median) of {args.runs} interleaved runs; ratio = min / the fp32 "
          "original's min.\n")
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as folder:
        work = args.work or Path(folder)
        work.mkdir(parents=True, exist_ok=True)
        for model in args.models:
            start = time.perf_counter()
            lines = report(model, args.past, args.runs, work, args.profile)
            print("\n".join(lines), flush=True)
            print(f"({model.name}: {time.perf_counter() - start:.0f} s)\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
