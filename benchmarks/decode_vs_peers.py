"""Decoders with a KV cache, side by side with the peers, one run: a decode step and a prefill, fp32 and int4.

    .venv/bin/python benchmarks/decode_vs_peers.py benchmarks/_work/base_kv/gpt2.dynamo_kv.onnx ... \
        [--past 128 1024] [--runs 30] > benchmarks/results/decode.md

Per model (base-width KV-cache exports: ``benchmarks/make_base_width.py --kv``):

* fp32: the original; ``gsrewrite optimize``; onnxruntime's transformers optimizer (``model_type gpt2``, heads and
  hidden size given); onnxscript's ``optimize_for_ort``. Each peer runs in its own process (a crash is a result).
* int4 (block 32, symmetric): onnxruntime's ``MatMulNBitsQuantizer`` on the original; ``gsrewrite compress int4`` on
  the original; ``gsrewrite optimize --compress int4`` (fusions first). gsrewrite's top-1 check is relaxed
  (``--min-top1 0``): random-weight logits over a 32-50k vocabulary are near ties, so the top-1 class of an int4
  model is noise there; the cosine is reported for all.
* Latency: ``gsrewrite bench``'s library call, batch 1, 1 thread, onnxruntime ORT_ENABLE_ALL, interleaved, min and
  median of ``--runs``, at a decode step (1 new token over ``--past``) and a prefill (128 tokens, no past).
* Agreement: every output against the fp32 original on the same decode-step feed: max abs difference (fp32 rows)
  and the cosine of the logits (int4 rows).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _isolate

from gsrewrite.pipelines.bench import bench, decoder_phases

GSREWRITE = Path(sys.executable).parent / "gsrewrite"


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

    model = onnx.load(src)
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)
    return ""


def _run(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    return dict(zip(names, session.run(None, {k: v for k, v in feed.items() if k in wanted}), strict=True))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def variants(src: Path, work: Path) -> list[tuple[str, Path, str]]:
    """(label, path, note) for every variant that could be made; a failed one keeps its note, no path."""
    made: list[tuple[str, Path, str]] = [("fp32 original", src, "")]
    stem = src.stem
    out = work / f"{stem}.gsrewrite.onnx"
    made.append(("gsrewrite optimize", out, _gsrewrite("optimize", str(src), str(out), "-q")))
    hints = _hints(src)
    for name, label in (("ort-transformers-hinted", "onnxruntime transformers optimizer"),
                        ("onnxscript", "onnxscript optimize_for_ort")):
        out = work / f"{stem}.{name}.onnx"
        result = _isolate.run("tool", [name, str(src), str(out), json.dumps(hints)], timeout=1800)
        made.append((label, out, result.get("error", "")))
    out = work / f"{stem}.ort-int4.onnx"
    try:
        note = _ort_int4(src, out)
    except Exception as exc:  # the quantizer's own failure is a result
        note = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    made.append(("onnxruntime MatMulNBits int4", out, note))
    out = work / f"{stem}.int4.onnx"
    made.append(("gsrewrite compress int4", out, _gsrewrite("compress", str(src), str(out), "-s", "int4",
                                                            "--min-top1", "0", "--bench-runs", "0", "-q")))
    out = work / f"{stem}.optimize-int4.onnx"  # optimize, then int4 on the fused model
    made.append(("gsrewrite optimize + int4", out,
                 _gsrewrite("compress", str(work / f"{stem}.gsrewrite.onnx"), str(out), "-s", "int4", "--min-top1",
                            "0", "--bench-runs", "0", "-q")))
    return made


def report(src: Path, pasts: list[int], runs: int, work: Path) -> list[str]:
    made = variants(src, work)
    ok = [(label, path) for label, path, note in made if not note and path.exists()]
    original = onnx.load(src, load_external_data=False)
    lines = [f"## {src.name}", ""]
    failed = [f"- {label}: {note}" for label, _, note in made if note]
    lines += (["Not made:", *failed, ""] if failed else [])
    phases = {}
    for past in pasts:
        found = decoder_phases(original, {"batch": 1}, past=past, new_tokens=128)
        assert found is not None, f"{src} has no KV cache"
        phases[f"decode, past {past}"] = found[0]
        phases.setdefault("prefill, 128 tokens", found[1])
    reference = _run(src, phases[f"decode, past {pasts[0]}"].feed)
    agreement = {}
    for label, path in ok:
        got = _run(path, phases[f"decode, past {pasts[0]}"].feed)
        worst = max(float(np.abs(got[k] - v).max()) for k, v in reference.items() if k in got)
        agreement[label] = (worst, _cosine(got["logits"], reference["logits"]))
    header = ["variant", "MB", "max abs vs fp32", "logits cosine"]
    for name in phases:
        header += [f"{name}: min ms", "ratio", "tokens/s"]
    rows = {label: [label, f"{path.stat().st_size / 1e6:.0f}", f"{agreement[label][0]:.2e}",
                    f"{agreement[label][1]:.6f}"] for label, path in ok}
    for phase in phases.values():
        timed = bench([(label, str(path)) for label, path in ok], runs=runs, warmup=2, threads=1, inputs=phase.feed)
        base = timed.timings[0].min_ms
        for (label, _), timing in zip(ok, timed.timings, strict=True):
            rows[label] += [f"{timing.min_ms:.2f} ({timing.median_ms:.2f})", f"{timing.min_ms / base:.3f}",
                            f"{phase.tokens / (timing.min_ms / 1000):.1f}"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(row) + " |" for row in rows.values()]
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--past", nargs="+", type=int, default=[128, 1024])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--work", type=Path, default=None, help="keep the variants here (default: a temp folder)")
    args = parser.parse_args(argv)
    print("# Decoders with a KV cache: decode and prefill latency, side by side (benchmarks/decode_vs_peers.py)\n")
    print(f"Batch 1, 1 thread, ORT_ENABLE_ALL, min (median) of {args.runs} interleaved runs; ratio = min / the fp32 "
          "original's min.\n")
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as folder:
        work = args.work or Path(folder)
        work.mkdir(parents=True, exist_ok=True)
        for model in args.models:
            print("\n".join(report(model, args.past, args.runs, work)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
