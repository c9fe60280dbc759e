"""Base-width exports for speed measurements: BERT, GPT-2, ViT and a LLaMA-style model "where users are".

Reuses ``tests/fixtures/make_models.py`` (its ``Spec``s, seeded random weights, wrapper, exporters and
checks) with base-width configs instead of the tiny ones: hidden 768, 12 heads, intermediate 3072, 6 layers;
BERT vocab 30522, GPT-2 vocab 50257; ViT image 224, patch 16; LLaMA-style hidden 768, 12 query / 4 KV heads
(GQA), intermediate 2048, vocab 32000, rotary.  HF default ``initializer_range`` (0.02), not the fixtures'
0.1.  Batch 2, sequence 128.  Nothing is downloaded.  Files are 100-400 MB: they stay out of git
(``benchmarks/_work/`` is ignored).

Variants (``--variant``): ``legacy14_dyn`` (TorchScript, opset 14, ``dynamic_axes``) and ``dynamo_dyn``
(torch.export, opset 18, ``dynamic_shapes``) by default; the static ``legacy14`` / ``dynamo`` on request, and
as a fallback when a ``_dyn`` export fails.  A ``_dyn`` model is exported at (2, 128), checked against
PyTorch eager there and at (3, 64); static ones at (2, 128).  The npz files hold (2, 128) for all, so that
static and dynamic files are timed on the same inputs.  Every output within ``ATOL`` (1e-3) of PyTorch.

Run with the fixture venv (tests/fixtures/README.md); ~45 s for the default 8 models on 2 cores::

    /work/fixture-venv/bin/python benchmarks/make_base_width.py
    /work/fixture-venv/bin/python benchmarks/make_base_width.py --only bert --variant legacy14

``--kv`` exports decoders WITH a KV cache instead (``tests/fixtures/make_kv_models.py``: optimum's signatures,
variants ``legacy14_kv`` and ``dynamo_kv``) into ``benchmarks/_work/base_kv/``: GPT-2 (``gpt2``: hidden 768, 12
heads, 6 layers, vocab 50257, 2048 positions so that a past of 1024 fits) and a LLaMA-style decoder (``llama``:
hidden 1024, 16 query / 4 KV heads, 6 layers, intermediate 2816, vocab 32000); ``--only llama_2g`` makes a
2.3 GB one (hidden 2048, 32 / 8 heads, 10 layers, intermediate 5632, vocab 32000) with its weights in
``NAME.VARIANT.onnx.data``.  Traced at (batch, sequence, past) ``KV_TRACE``, checked against PyTorch at
``KV_CHECKED``; ``inputs.npz`` / ``outputs.npz`` hold the decode step ``KV_DECODE`` (batch 1, 1 new token, past
128), ``prefill.inputs.npz`` / ``prefill.outputs.npz`` the prefill ``KV_PREFILL`` (128 tokens)::

    /work/fixture-venv/bin/python benchmarks/make_base_width.py --kv                     # gpt2, llama: ~3 min
    /work/fixture-venv/bin/python benchmarks/make_base_width.py --kv --only llama_2g     # 2.3 GB: 2-4 min per variant

``--kv --hf`` also saves each decoder's seeded Hugging Face checkpoint (the same weights the export holds) to
``NAME_hf/`` next to it, what onnxruntime-genai's model builder reads (``benchmarks/decode_vs_builder.py``)::

    /work/fxenv/bin/python benchmarks/make_base_width.py --kv --only llama --variant dynamo_kv --hf

``--time`` (project venv; needs only numpy and onnxruntime) times every model of the folder in onnxruntime
(CPU, 1 thread, ORT_ENABLE_ALL, interleaved), with ``--optimize`` also after ``gsrewrite optimize``, and
writes ``TIMES.md`` next to them (docs/benchmarks.md)::

    .venv/bin/python benchmarks/make_base_width.py --time --optimize --runs 30
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "fixtures"))

import make_kv_models as kv  # noqa: E402
import make_models as mm  # noqa: E402

OUT_DIR = HERE / "_work" / "base"
BATCH, SEQ = 2, 128
CHECK = (3, 64)  # second (batch, sequence) a *_dyn model is checked at
ATOL = 1e-3
VARIANTS = ("legacy14_dyn", "dynamo_dyn")
BASE = {"hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 3072}
CONFIGS: dict[str, dict[str, Any]] = {
    "bert": {**BASE, "vocab_size": 30522, "max_position_embeddings": 512},
    "gpt2": {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 6, "n_head": 12,
             "n_inner": 3072, "use_cache": False, "bos_token_id": 50256, "eos_token_id": 50256},
    "vit": {**BASE, "image_size": 224, "patch_size": 16},
    "llama": {**BASE, "intermediate_size": 2048, "num_key_value_heads": 4, "vocab_size": 32000,
              "max_position_embeddings": 2048, "use_cache": False},
}  # fmt: skip


# --kv: decoders with a cache.  (batch, sequence, past)
KV_OUT_DIR = HERE / "_work" / "base_kv"
KV_TRACE = (2, 8, 16)
KV_DECODE, KV_PREFILL = (1, 1, 128), (1, 128, 0)
KV_CHECKED = (KV_TRACE, KV_PREFILL, (1, 1, 1024), KV_DECODE)  # KV_PREFILL and KV_DECODE (last) are stored
LLAMA_KV = {"hidden_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 16, "num_key_value_heads": 4,
            "intermediate_size": 2816, "vocab_size": 32000, "max_position_embeddings": 4096}  # fmt: skip
KV_CONFIGS: dict[str, dict[str, Any]] = {
    "gpt2": {**{k: v for k, v in CONFIGS["gpt2"].items() if k != "use_cache"}, "n_positions": 2048},
    "llama": LLAMA_KV,
    "llama_2g": {**LLAMA_KV, "hidden_size": 2048, "num_hidden_layers": 10, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "intermediate_size": 5632},
}  # fmt: skip
KV_DEFAULT = ("gpt2", "llama")  # llama_2g (2.3 GB of weights) on request
EXTERNAL = {"llama_2g"}  # over 2 GB: weights in NAME.VARIANT.onnx.data


def base_spec(name: str) -> mm.Spec:
    """The fixture ``Spec`` of ``name`` with its base-width config."""
    return dataclasses.replace(mm.SPECS[name], config=CONFIGS[name])


def shapes(variant: str) -> list[tuple[int, int]]:
    """Export at the first, check at each, store the last (make_models.default_shapes semantics)."""
    return [(BATCH, SEQ), CHECK, (BATCH, SEQ)] if variant.endswith("_dyn") else [(BATCH, SEQ)]


def kv_spec(name: str) -> kv.KvSpec:
    """The KV fixture spec of ``name`` (``llama_2g``: LLaMA's) with its base-width config."""
    return dataclasses.replace(kv.SPECS[name.split("_")[0]], name=name, config=KV_CONFIGS[name])


@dataclasses.dataclass
class Made:
    """One exported model, for MANIFEST.md."""

    stem: str
    seconds: float
    max_diff: float = 0.0
    error: str = ""
    note: str = ""
    mb: float = 0.0
    nodes: int = 0


def make_one(name: str, variant: str, out_dir: Path) -> Made:
    """Export, check and write ``name.variant``; a failed ``_dyn`` export falls back to the static one."""
    start = time.perf_counter()
    res = mm.export_one(base_spec(name), variant, out_dir, shapes(variant))
    if res.error and variant.endswith("_dyn"):
        static = variant.removesuffix("_dyn")
        print(f"{res.stem}: {res.error}; falling back to {name}.{static}", flush=True)
        made = make_one(name, static, out_dir)
        made.note = f"{res.stem} failed ({res.error}); static instead. {made.note}".strip()
        return made
    made = Made(res.stem, time.perf_counter() - start, res.max_diff, res.error, res.note)
    if res.model is not None:
        made.nodes = len(res.model.graph.node)
        made.mb = (out_dir / f"{res.stem}.onnx").stat().st_size / 1e6
        if res.max_diff > ATOL:
            made.error = f"max |ort - torch| {res.max_diff:.1e} > {ATOL:g}"
    return made


def save_hf(name: str, out_dir: Path, perturb: bool = True) -> Path:
    """The seeded decoder ``name`` (the weights its exports hold) as a Hugging Face checkpoint in ``NAME_hf/``, with
    a word-level tokenizer of its vocabulary (``t0``, ``t1``, ...: the model builder insists on one)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    model, cfg = mm.build(kv_spec(name), "eager", perturb)
    folder = out_dir / f"{name}_hf"
    model.save_pretrained(folder)
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(cfg.vocab_size)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0", bos_token="t1",
                            eos_token="t2").save_pretrained(folder)
    print(f"  wrote {folder}", flush=True)
    return folder


def make_kv_one(name: str, variant: str, out_dir: Path, perturb: bool = True) -> Made:
    """Export, check and write the KV-cache decoder ``name.variant``; the notes say how long each part took."""
    external = name in EXTERNAL
    res = kv.export_kv(kv_spec(name), variant, out_dir, KV_CHECKED, KV_TRACE, external=external, perturb=perturb)
    made = Made(res.stem, res.export_s + res.check_s, res.max_diff, res.error)
    if res.model is not None:
        made.nodes = len(res.model.graph.node)
        made.mb = sum(p.stat().st_size for p in res.files if p.suffix in (".onnx", ".data")) / 1e6
        notes = [f"export {res.export_s:.0f} s, check {res.check_s:.0f} s", "weights in .onnx.data" * external,
                 "norms: HF init" * (not perturb)]  # fmt: skip
        made.note = "; ".join(filter(None, notes))
        if res.max_diff > ATOL:
            made.error = f"max |ort - torch| {res.max_diff:.1e} > {ATOL:g}"
    for path in res.files:
        print(f"  wrote {path}", flush=True)
    return made


INTRO = (f"Batch {BATCH}, sequence {SEQ} (npz files); `_dyn` also checked at batch {CHECK[0]}, sequence {CHECK[1]}.  "
         f"`max diff` = largest |onnxruntime - PyTorch eager| (tolerance {ATOL:g}).")  # fmt: skip
KV_INTRO = (f"KV-cache decoders (tests/fixtures/make_kv_models.py).  (batch, sequence, past): traced at {KV_TRACE}, "
            f"checked at {', '.join(map(str, KV_CHECKED))}; npz: decode step {KV_DECODE}, prefill {KV_PREFILL}.  "
            f"`max diff` = largest |onnxruntime - PyTorch eager| (tolerance {ATOL:g}).")  # fmt: skip


def write_manifest(made: list[Made], out_dir: Path, intro: str = INTRO) -> None:
    """MANIFEST.md: size, nodes, check and export time of every model of this run."""
    lines = ["# Base-width models (generated by `benchmarks/make_base_width.py`; do not edit)", "", intro, "",
             "| file | MB | nodes | max diff | export + check s | notes |", "|---|---|---|---|---|---|"]  # fmt: skip
    rows = _kept_rows(out_dir, {m.stem for m in made})
    for m in made:
        notes = "; ".join(filter(None, [m.error, m.note]))
        rows[m.stem] = f"| {m.stem}.onnx | {m.mb:.0f} | {m.nodes} | {m.max_diff:.1e} | {m.seconds:.0f} | {notes} |"
    (out_dir / "MANIFEST.md").write_text("\n".join(lines + [rows[k] for k in sorted(rows)]) + "\n")


def _kept_rows(out_dir: Path, remade: set[str]) -> dict[str, str]:
    """Rows of an existing MANIFEST.md for models that this run did not remake and that still exist."""
    path, rows = out_dir / "MANIFEST.md", {}
    for line in path.read_text().splitlines() if path.exists() else []:
        stem = line.split(" | ")[0].removeprefix("| ").removesuffix(".onnx")
        if line.startswith("| ") and stem not in remade and (out_dir / f"{stem}.onnx").exists():
            rows[stem] = line
    return rows


def generate(names: list[str], variants: list[str], out_dir: Path, kv_cache: bool = False,
             perturb: bool = True) -> int:  # fmt: skip
    """Export every (name, variant) into ``out_dir`` (``kv_cache``: the KV-cache decoders); return the failures."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for name in names:
        for variant in variants:
            m = make_kv_one(name, variant, out_dir, perturb) if kv_cache else make_one(name, variant, out_dir)
            status = m.error or f"{m.mb:.0f} MB, {m.nodes} nodes, max diff {m.max_diff:.1e}"
            print(f"{m.stem:20s} {m.seconds:6.0f} s  {status} {m.note}", flush=True)
            made.append(m)
    write_manifest(made, out_dir, KV_INTRO if kv_cache else INTRO)
    return sum(bool(m.error) for m in made)


# ----------------------------------------------------------------------------------------------------------
# --time: onnxruntime latency, interleaved, and gsrewrite optimize


def optimize(path: Path, out: Path, gsrewrite: Path) -> tuple[float, str]:
    """``gsrewrite optimize path -o out --json``; (wall seconds, a summary: nodes, fused ops, validation)."""
    start = time.perf_counter()
    cmd = [str(gsrewrite), "optimize", str(path), "-o", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        return seconds, f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}"
    report = json.loads(proc.stdout)
    fused = {k.removeprefix("com.microsoft."): n for k, n in report["ops_after"].items()
             if k.startswith("com.microsoft.") or k.endswith("Normalization")}  # fmt: skip
    ok = "validated" if report["validation"]["ok"] else f"NOT validated: {report['validation']['summary']}"
    ops = ", ".join(f"{k} {n}" for k, n in sorted(fused.items()))
    return seconds, f"{report['nodes_before']} -> {report['nodes_after']} nodes; {ops}; {ok}"


def session(path: Path) -> Any:
    """A CPU session with 1 intra-op thread, 1 inter-op thread, ORT_ENABLE_ALL."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def interleaved(paths: dict[str, Path], feeds: dict[str, dict[str, Any]], runs: int) -> dict[str, list[float]]:
    """Seconds per run of every model, alternating between the models in each of ``runs`` rounds."""
    sessions = {k: session(p) for k, p in paths.items()}
    for _ in range(2):  # warm-up
        for k, sess in sessions.items():
            sess.run(None, feeds[k])
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(runs):
        for k, sess in sessions.items():
            start = time.perf_counter()
            sess.run(None, feeds[k])
            times[k].append(time.perf_counter() - start)
    return times


def max_diff(path: Path, stem: Path) -> float:
    """Largest |output - stored output| of ``path`` on ``stem``'s inputs (ORT_ENABLE_ALL, 1 thread)."""
    sess = session(path)
    names = [o.name for o in sess.get_outputs()]
    ref = np.load(f"{stem}.outputs.npz")
    outs = sess.run(names, dict(np.load(f"{stem}.inputs.npz")))
    return max(float(np.max(np.abs(o - ref[n]))) for n, o in zip(names, outs, strict=True))


def _row(name: str, t: dict[str, np.ndarray]) -> str:
    """One latency table row (ms): original min/median, optimized min/median, ratios opt / original."""
    base, opt = t[name], t.get(f"{name} opt")
    row = f"| {name} | {base.min():.1f} | {np.median(base):.1f} |"
    if opt is None:
        return row + " - | - | - | - |"
    ratios = opt.min() / base.min(), np.median(opt) / np.median(base)
    return row + f" {opt.min():.1f} | {np.median(opt):.1f} | {ratios[0]:.2f} | {ratios[1]:.2f} |"


def time_family(stems: list[Path], opt_dir: Path, runs: int) -> list[str]:
    """Time one architecture's models and their optimized copies interleaved; one table row per model."""
    paths = {s.name: Path(f"{s}.onnx") for s in stems}
    paths.update({f"{s.name} opt": opt_dir / f"{s.name}.onnx" for s in stems if (opt_dir / f"{s.name}.onnx").exists()})
    inputs = {s.name: dict(np.load(f"{s}.inputs.npz")) for s in stems}
    feeds = {k: inputs[k.split()[0]] for k in paths}
    t = {k: np.array(v) * 1e3 for k, v in interleaved(paths, feeds, runs).items()}
    return [_row(s.name, t) for s in stems]


def optimize_all(stems: list[Path], opt_dir: Path, gsrewrite: Path) -> list[str]:
    """Run ``gsrewrite optimize`` on every model; table rows with wall time, verdict and output check."""
    opt_dir.mkdir(exist_ok=True)
    rows = ["| model | optimize wall s | result | max diff vs npz (ORT_ENABLE_ALL) |", "|---|---|---|---|"]
    for s in stems:
        seconds, verdict = optimize(Path(f"{s}.onnx"), opt_dir / f"{s.name}.onnx", gsrewrite)
        diff = float("nan") if verdict.startswith("exit") else max_diff(opt_dir / f"{s.name}.onnx", s)
        rows.append(f"| {s.name} | {seconds:.1f} | {verdict} | {diff:.1e} |")
        print(rows[-1], flush=True)
    return [*rows, ""]


def time_all(out_dir: Path, runs: int, gsrewrite: Path | None) -> str:
    """Optimize (when ``gsrewrite`` is given) and time every model of ``out_dir``; a markdown report.

    Models are timed per architecture (its variants and their optimized copies interleaved), so that at
    most one architecture's sessions are in memory.
    """
    stems = [p.with_suffix("") for p in sorted(out_dir.glob("*.onnx"))]
    opt_dir = out_dir / "optimized"
    lines = optimize_all(stems, opt_dir, gsrewrite) if gsrewrite is not None else []
    lines += [f"Latency ms over {runs} interleaved runs per model (1 intra-op thread, ORT_ENABLE_ALL; `opt` = "
              "after `gsrewrite optimize`; ratio = opt / original).", "",
              "| model | min | median | opt min | opt median | ratio min | ratio median |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for family in sorted({s.name.split(".")[0] for s in stems}):
        rows = time_family([s for s in stems if s.name.split(".")[0] == family], opt_dir, runs)
        print("\n".join(rows), flush=True)
        lines += rows
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Generate the base-width models (or time them with ``--time``); return a process exit code."""
    p = argparse.ArgumentParser(description="Export base-width BERT / GPT-2 / ViT / LLaMA-style models.")
    p.add_argument("--only", action="append", choices=sorted({*CONFIGS, *KV_CONFIGS}),
                   help=f"architecture(s) (default: all; --kv: {', '.join(KV_DEFAULT)})")  # fmt: skip
    defaults = f"default: {', '.join(VARIANTS)}; --kv: {', '.join(kv.VARIANTS)}"
    p.add_argument("--variant", action="append", choices=["legacy14", "dynamo", *VARIANTS, *kv.VARIANTS],
                   help=f"exporter variant(s) ({defaults})")  # fmt: skip
    p.add_argument("--kv", action="store_true", help="decoders with a KV cache (gpt2, llama, llama_2g) instead")
    p.add_argument("--hf-norms", action="store_true", help="--kv: keep HF's norm init (weights 1) unperturbed")
    p.add_argument("--hf", action="store_true", help="--kv: also save each decoder's Hugging Face checkpoint")
    p.add_argument("--out", type=Path, help=f"output folder (default: {OUT_DIR}; --kv: {KV_OUT_DIR})")
    p.add_argument("--time", action="store_true", help="time the models of --out instead (onnxruntime)")
    p.add_argument("--optimize", action="store_true", help="with --time: gsrewrite optimize each model first")
    p.add_argument("--runs", type=int, default=20, help="--time: interleaved runs per model (default: 20)")
    p.add_argument("--gsrewrite", type=Path, default=HERE.parent / ".venv" / "bin" / "gsrewrite")
    args = p.parse_args(argv)
    out = args.out or (KV_OUT_DIR if args.kv else OUT_DIR)
    if args.time:
        report = time_all(out, args.runs, args.gsrewrite if args.optimize else None)
        (out / "TIMES.md").write_text(report)
        return 0
    configs, variants = (KV_CONFIGS, kv.VARIANTS) if args.kv else (CONFIGS, ("legacy14", "dynamo", *VARIANTS))
    wrong = [x for x in [*(args.only or []), *(args.variant or [])] if x not in (*configs, *variants)]
    if wrong:
        p.error(f"{', '.join(wrong)}: not a choice {'with' if args.kv else 'without'} --kv (architectures: "
                f"{', '.join(configs)}; variants: {', '.join(variants)})")  # fmt: skip
    names = args.only or list(KV_DEFAULT if args.kv else CONFIGS)
    variants = args.variant or (kv.VARIANTS if args.kv else VARIANTS)
    if args.hf and args.kv:
        for name in names:
            save_hf(name, out, not args.hf_norms)
    return int(generate(names, list(variants), out, args.kv, not args.hf_norms) > 0)


if __name__ == "__main__":
    sys.exit(main())
