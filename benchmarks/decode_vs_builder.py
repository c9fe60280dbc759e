"""A LLaMA-style decoder's decode step: gsrewrite's outputs side by side with onnxruntime-genai's model builder.

    .venv/bin/python benchmarks/decode_vs_builder.py \\
        --model llama benchmarks/_work/base_kv/llama.dynamo_kv.onnx benchmarks/_work/base_kv/llama_hf \\
        --model smollm2 REAL/smollm2.dynamo_kv.onnx REAL/smollm2_hf \\
        [--past 128 1024] [--runs 40] [--work DIR] [--profile] [--out benchmarks/results/decode_vs_builder.md]

(REAL: ``benchmarks/make_real_models.py``'s folder.)

Per model (an export with a KV cache, optimum's signature, and the Hugging Face checkpoint it came from):

* the original export (fp32);
* ``gsrewrite optimize`` with the default contract (attention over the repeated cache: MultiHeadAttention),
  with ``--contract batch1-chunks`` (GroupQueryAttention) and with ``--contract batch1-chunks --contract
  unpadded-prompts`` (GroupQueryAttention rotating Q/K itself over one packed QKV projection);
* ``gsrewrite optimize --target genai --contract unpadded``: the folder onnxruntime-genai's loop runs
  (``batch1-chunks`` and ``shared-kv-buffer`` implied; ``unpadded``: no padding anywhere, as the loop feeds at
  batch 1 and the builder's graphs assume, so GroupQueryAttention takes no bias from the mask), timed as that loop
  feeds it (see the builder's below);
* ``gsrewrite optimize --compress int4`` by default, under both contracts and for the genai target
  (``--min-top1 0 --min-cosine 0.5``: random-weight logits are near ties, and SmolLM2-135M's int4 misses the
  default tolerance; the table gives every variant's cosine, the builder's included); MatMulNBits'
  ``accuracy_level`` is the one compress measured faster here;
* onnxruntime-genai's model builder, fp32 and int4 (``-e cpu``), made next to the checkpoint (``builder_fp32``,
  ``builder_int4``) with ``--builder-python`` unless there. Each is timed twice: plainly (a past of P tokens in,
  a present of P + 1 out, as every other variant) and as its generation loop feeds it (``past_present_share_buffer``:
  one max-length buffer per cache tensor bound as both past and present through IOBinding, the mask P + 1 long).

Timing: batch 1, 1 intra-op thread, ORT_ENABLE_ALL; one decode step (1 new token over a past of P, the
past as the original's own prefill of as many random token ids makes it, feeds by input name: the builder orders
its past keys first and has no position ids); every variant's
session open and the runs interleaved in a shuffled order each round. Each run records its wall time and the CPU
time of the calling thread (``time.thread_time``: with one intra-op thread onnxruntime runs the kernels on it).
The machine is shared (2 cores, other jobs): wall time includes the time the thread waited for a core, CPU time
does not; the tables give the min of both and the median CPU time, ratios are of CPU time mins to the original's.
Where a model's weights land matters too (the same file in two sessions: up to 7% apart), so the rounds run in
``--blocks`` blocks, each opening every session anew in a shuffled order; the min is over all blocks.
``--profile``: onnxruntime's profiler per op type at the first past (min of 8 runs per op type).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _markdown as md

log = logging.getLogger("decode_vs_builder")
HERE = Path(__file__).resolve().parent
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
RELAXED = ("--min-top1", "0", "--min-cosine", "0.5")
CHUNKS = ("--contract", "batch1-chunks")
UNPADDED = ("--contract", "unpadded-prompts")
NO_PADDING = ("--contract", "unpadded")
PROMPTS = (*CHUNKS, *UNPADDED)
FUSED = ("MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding", "SimplifiedLayerNormalization",
         "SkipSimplifiedLayerNormalization", "MatMulNBits", "GatherBlockQuantized", "QuickGelu", "FusedMatMul")


@dataclass
class Variant:
    """One timed model: ``shared``: fed as the builder's generation loop feeds it (one buffer per cache tensor)."""

    label: str
    path: Path
    shared: bool = False
    note: str = ""
    seconds: float = 0.0
    wall: dict[int, list[float]] = field(default_factory=dict)
    cpu: dict[int, list[float]] = field(default_factory=dict)


def _gsrewrite(out: Path, *args: str) -> str:
    """``gsrewrite ARGS -o out -q``: "" or the error's last line."""
    done = subprocess.run([str(GSREWRITE), *args, "-o", str(out), "-q"], capture_output=True, text=True,
                          timeout=7200, check=False)
    return "" if done.returncode == 0 else f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"


def _builder(python: str, hf: Path, out: Path, precision: str) -> str:
    """onnxruntime-genai's model builder (``-p precision -e cpu``) into ``out``."""
    with tempfile.TemporaryDirectory(prefix="builder-cache-") as cache:
        done = subprocess.run([python, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
                               "-p", precision, "-e", "cpu", "-c", cache], capture_output=True, text=True,
                              timeout=7200, check=False)
    return "" if done.returncode == 0 else f"builder exit {done.returncode}: {done.stderr.strip()[-200:]}"


def _made(out: Path, make: Any) -> tuple[str, float]:
    """Make ``out`` unless it exists: (the error note or "", seconds; 0 when reused)."""
    if out.exists():
        return "", 0.0
    start = time.perf_counter()
    note = make()
    if note:
        log.warning("%s: %s", out.name, note)
    return note, time.perf_counter() - start


def variants(name: str, original: Path, hf: Path, work: Path, python: str) -> list[Variant]:
    """Every variant of one model, made into ``work`` (and the builder's next to ``hf``) unless already there."""
    relaxed = RELAXED  # random weights: near-tie logits; SmolLM2-135M: int4 misses the default (cosine 0.91)
    src = str(original)
    genai = (*NO_PADDING, "--target", "genai")
    plan = [
        ("gsrewrite optimize (default contract)", work / f"{name}.default.onnx", ("optimize", src), False),
        ("gsrewrite optimize --contract batch1-chunks", work / f"{name}.chunks.onnx", ("optimize", src, *CHUNKS),
         False),
        ("gsrewrite optimize + unpadded-prompts", work / f"{name}.prompts.onnx", ("optimize", src, *PROMPTS), False),
        ("gsrewrite --target genai + unpadded, its loop's shared buffer", work / f"{name}.genai"
         / "model.onnx", ("optimize", src, *genai), True),
        ("gsrewrite optimize --compress int4 (default contract)", work / f"{name}.default.int4.onnx",
         ("optimize", src, "--compress", "int4", *relaxed), False),
        ("gsrewrite optimize --compress int4 + unpadded-prompts", work / f"{name}.prompts.int4.onnx",
         ("optimize", src, *PROMPTS, "--compress", "int4", *relaxed), False),
        ("gsrewrite --target genai --compress int4 + unpadded, shared buffer", work / f"{name}.genai.int4"
         / "model.onnx", ("optimize", src, *genai, "--compress", "int4", *relaxed), True),
    ]
    made = [Variant("original export (fp32)", original)]
    for label, out, args, shared in plan:
        target = out.parent if shared else out  # --target genai writes a folder
        note, seconds = _made(out, lambda target=target, args=args: _gsrewrite(target, *args))
        made.append(Variant(label, out, shared=shared, note=note, seconds=seconds))
    for precision in ("fp32", "int4"):
        folder = hf.parent / f"builder_{precision}"
        note, seconds = _made(folder / "model.onnx", lambda folder=folder, p=precision: _builder(python, hf, folder, p))
        made.append(Variant(f"builder {precision}, plain feeds", folder / "model.onnx", note=note, seconds=seconds))
        made.append(Variant(f"builder {precision}, its generation loop's shared buffer", folder / "model.onnx",
                            shared=True))
    return made


# --- feeds and sessions -----------------------------------------------------------------------------------------
def _session(path: Path, profile: str | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _max_length(path: Path) -> int:
    """The builder's shared buffer length: its genai_config.json's search.max_length."""
    config = json.loads((path.parent / "genai_config.json").read_text())
    return int(config["search"]["max_length"])


class Step:
    """One decode step of one variant at one past: a plain ``run`` with its feeds, or (``shared``) an IOBinding over
    max-length cache buffers that are both past and present."""

    def __init__(self, session: Any, variant: Variant, past: int, pasts: dict[str, np.ndarray]) -> None:
        import onnxruntime as ort

        self.session, self.shared = session, variant.shared
        self._buffers: list[Any] = []  # the shared caches live as long as the binding
        feeds: dict[str, np.ndarray] = {}
        for spec in session.get_inputs():
            if spec.name == "input_ids":
                feeds[spec.name] = np.array([[7]], np.int64)
            elif spec.name == "attention_mask":
                feeds[spec.name] = np.ones((1, past + 1), np.int64)
            elif spec.name == "position_ids":
                feeds[spec.name] = np.array([[past]], np.int64)
            elif spec.name in pasts:
                feeds[spec.name] = pasts[spec.name]
            else:
                raise ValueError(f"{variant.label} takes {spec.name!r}, which a decode step does not feed")
        self.feeds = feeds
        if not self.shared:
            return
        length = _max_length(variant.path)
        self.binding = session.io_binding()
        self.binding.bind_output("logits")  # first: get_outputs() lists the outputs in binding order
        for name, value in feeds.items():
            if name in pasts:
                buffer = np.zeros((*value.shape[:2], length, value.shape[3]), np.float32)
                buffer[:, :, :past] = value
                shared = ort.OrtValue.ortvalue_from_numpy(buffer)
                self.binding.bind_ortvalue_input(name, shared)
                self.binding.bind_ortvalue_output(name.replace("past_key_values", "present"), shared)
                self._buffers.append((buffer, shared))
            else:
                self.binding.bind_cpu_input(name, value)

    def run(self) -> np.ndarray:
        if self.shared:
            self.session.run_with_iobinding(self.binding)
            return np.asarray(self.binding.get_outputs()[0].numpy())
        return np.asarray(self.session.run(["logits"], self.feeds)[0])


def _pasts(session: Any, past: int, seed: int) -> dict[str, np.ndarray]:
    """The cache the original's own prefill of ``past`` random token ids makes (as generation makes it), by the
    past inputs' names: [1, kv_heads, past, head_size] each."""
    rng = np.random.default_rng(seed)
    specs = {spec.name: spec for spec in session.get_inputs()}
    vocab = int(session.get_outputs()[0].shape[-1]) if isinstance(session.get_outputs()[0].shape[-1], int) else 1000
    feeds: dict[str, np.ndarray] = {"input_ids": rng.integers(0, vocab, (1, past), dtype=np.int64)}
    if "attention_mask" in specs:
        feeds["attention_mask"] = np.ones((1, past), np.int64)
    if "position_ids" in specs:
        feeds["position_ids"] = np.arange(past, dtype=np.int64)[None]
    feeds.update({name: np.zeros((1, spec.shape[1], 0, spec.shape[3]), np.float32) for name, spec in specs.items()
                  if name.startswith("past_key_values")})
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feeds), strict=True))
    return {name: got[name.replace("past_key_values", "present")] for name in specs
            if name.startswith("past_key_values")}


def _fused(path: Path) -> str:
    counts = collections.Counter(n.op_type for n in onnx.load(path, load_external_data=False).graph.node
                                 if n.op_type in FUSED)
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items())) or "none"


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def time_all(made: list[Variant], pasts: list[int], runs: int, blocks: int, seed: int) -> dict[str, list[Any]]:
    """Interleaved decode steps of every variant at every past, in ``blocks`` blocks of fresh sessions opened in a
    shuffled order (the same model in two sessions differs by up to 7% on this machine: where its weights land);
    the agreement with the original at the first past."""
    agreement: dict[str, list[Any]] = {}
    shuffle = random.Random(seed)
    for variant in made:
        variant.wall, variant.cpu = {past: [] for past in pasts}, {past: [] for past in pasts}
    for block in range(blocks):
        opening = list(range(len(made)))
        shuffle.shuffle(opening)
        opened: dict[Path, Any] = {}
        for index in opening:
            opened.setdefault(made[index].path, _session(made[index].path))
        sessions = [opened[v.path] for v in made]
        for past in pasts:
            caches = _pasts(sessions[0], past, seed)
            steps = [Step(s, v, past, caches) for s, v in zip(sessions, made, strict=True)]
            if block == 0 and past == pasts[0]:
                reference = steps[0].run()
                for step, variant in zip(steps, made, strict=True):
                    got = step.run()
                    agreement[variant.label] = [md.sci(float(np.abs(got - reference).max())),
                                                f"{_cosine(got, reference):.6f}"]
            order = list(zip(steps, made, strict=True))
            for _ in range(2):  # warm-up
                for step, _variant in order:
                    step.run()
            for _ in range(runs):
                shuffle.shuffle(order)
                for step, variant in order:
                    cpu, wall = time.thread_time(), time.perf_counter()
                    step.run()
                    variant.wall[past].append(time.perf_counter() - wall)
                    variant.cpu[past].append(time.thread_time() - cpu)
            log.info("block %d, past %d: %s", block, past,
                     ", ".join(f"{v.label[:24]} {min(v.cpu[past]) * 1e3:.2f}" for v in made))
        del steps, sessions, opened
    return agreement


def op_times(variant: Variant, past: int, pasts: dict[str, np.ndarray], runs: int = 8) -> dict[str, float]:
    """Milliseconds per op type of one decode step: per op type, the min over ``runs`` profiled runs."""
    with tempfile.TemporaryDirectory(prefix="decode-profile-") as folder:
        session = _session(variant.path, profile=str(Path(folder) / "p"))
        step = Step(session, variant, past, pasts)
        for _ in range(2 + runs):
            step.run()
        events = json.loads(Path(session.end_profiling()).read_text())
    per_run: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    run = 0
    for event in events:
        if event.get("cat") == "Session" and event.get("name") == "model_run":
            run += 1
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            per_run[run][event["args"]["op_name"]] += event["dur"] / 1000
    kept = [per_run[k] for k in sorted(per_run)[-runs:]]
    ops = {op for times in kept for op in times}
    return dict(sorted(((op, min(t.get(op, 0.0) for t in kept)) for op in ops), key=lambda item: -item[1]))


def report(name: str, made: list[Variant], pasts: list[int], runs: tuple[int, int], seed: int,
           profile: bool) -> list[str]:
    ok = [v for v in made if v.path.exists() and not v.note]
    agreement = time_all(ok, pasts, runs[0], runs[1], seed)
    lines = [f"## {name}", "", md.table(["variant", "made in s", "note"], [
        [v.label, f"{v.seconds:.0f}", v.note or ("reused" if not v.seconds and v is not made[0] else "")]
        for v in made]), ""]
    header = ["variant", "MB", "fused ops", f"logits max abs vs original (past {pasts[0]})", "logits cosine"]
    for past in pasts:
        header += [f"past {past}: CPU min (median) ms", "wall min ms", "ratio (CPU)"]
    rows = []
    for v in ok:
        weights = sum(p.stat().st_size for p in v.path.parent.glob(f"{v.path.name}*"))
        row = [v.label, f"{weights / 1e6:.0f}", _fused(v.path), *agreement[v.label]]
        for past in pasts:
            base = min(ok[0].cpu[past])
            row += [f"{min(v.cpu[past]) * 1e3:.2f} ({statistics.median(v.cpu[past]) * 1e3:.2f})",
                    f"{min(v.wall[past]) * 1e3:.2f}", f"{min(v.cpu[past]) / base:.3f}"]
        rows.append(row)
    lines += [md.table(header, rows), ""]
    if profile:
        chosen = [v for v in ok if v.label.startswith(("original", "gsrewrite optimize + unpadded",
                                                       "gsrewrite optimize --compress int4 + unpadded", "builder"))
                  and not v.shared]
        caches = _pasts(_session(ok[0].path), pasts[0], seed)
        times = {v.label: op_times(v, pasts[0], caches) for v in chosen}
        ops = sorted({op for t in times.values() for op in t},
                     key=lambda op: -max(t.get(op, 0.0) for t in times.values()))
        lines += [f"Per op type, decode step at past {pasts[0]} (onnxruntime profiler, 1 thread, ms: the min over 8 "
                  "runs per op type; total: their sum):", ""]
        table = [["total", *(f"{sum(times[v.label].values()):.2f}" for v in chosen)]]
        table += [[op, *(f"{times[v.label][op]:.3f}" if op in times[v.label] else "" for v in chosen)]
                  for op in ops if max(times[v.label].get(op, 0.0) for v in chosen) >= 0.02]
        lines += [md.table(["op type", *(v.label for v in chosen)], table), ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs=3, action="append", required=True, metavar=("NAME", "ONNX", "HF_DIR"),
                        type=str)
    parser.add_argument("--past", nargs="+", type=int, default=[128, 1024])
    parser.add_argument("--runs", type=int, default=30, help="interleaved rounds per block and past")
    parser.add_argument("--blocks", type=int, default=3, help="blocks of fresh sessions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=HERE / "_work" / "decode_vs_builder")
    parser.add_argument("--builder-python", default="/work/fxenv/bin/python")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "decode_vs_builder.md")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    lines = ["# Decode step: gsrewrite vs onnxruntime-genai's model builder (benchmarks/decode_vs_builder.py)", "",
             md.machine_line(), "", f"Batch 1, 1 intra-op thread, ORT_ENABLE_ALL; {args.blocks} blocks of fresh "
             f"sessions x {args.runs} interleaved rounds per past (after 2 warm-up rounds); ratio = CPU time min / "
             "the original's (see the script's docstring).", ""]
    for name, original, hf in args.model:
        start = time.perf_counter()
        made = variants(name, Path(original), Path(hf), args.work, args.builder_python)
        lines += report(name, made, args.past, (args.runs, args.blocks), args.seed, args.profile)
        lines += [f"({name}: {time.perf_counter() - start:.0f} s)", ""]
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
