"""int4 quality and size on real weights: every variant side by side against the fp32 original (issue 33, item 4).

    .venv/bin/python benchmarks/int4_quality.py [--real benchmarks/_work/real] [--work DIR] \
        [--fixtures-python /work/fxenv/bin/python] > benchmarks/results/int4_quality.md

The measurement: 4 chat prompts (the tokenizer's chat template, from ``REAL/smollm2_hf``, applied by the fixtures
venv's transformers in a subprocess: only the token ids cross), greedy-decoded for ``--tokens`` (120) tokens by the
fp32 original (``smollm2.dynamo_kv.onnx``) in onnxruntime, with its KV cache, all 120 whatever they are
(``--stop-at-eos`` stops at the end-of-turn token). Then prompt + continuation is teacher-forced through every
model (one run per prompt, empty past) and each next-token distribution over the continuation is compared with
the fp32 original's, run the same way: mean KL(fp32 || int4) over all positions and top-1 agreement (the share
of positions where the int4 model's most likely token is the fp32 model's).

Variants: the onnxruntime-genai builder's int4 (``REAL/builder_int4``, ``-p int4 -e cpu``) and fp32
(``REAL/builder_fp32``, a check that its own graph agrees with the export); ``gsrewrite.compress(.., "int4",
**options)`` of the dynamo export for each entry of :data:`VARIANTS` (no validation, no latency: this script is
the judge), saved to ``--work`` and reused when present (``--remake`` to rebuild; the seconds are the compress
call's, 0 when reused). File size: the model and its external data. All sessions: onnxruntime CPU, 2 threads,
ORT_ENABLE_ALL.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markdown import table

log = logging.getLogger("int4_quality")
HERE = Path(__file__).resolve().parent
PROMPTS = ("What is the capital of France?", "Write a haiku about the sea.", "How many legs does a spider have?",
           "Summarize the following notes in two sentences. The river town grew up around a stone bridge that was "
           "built more than six hundred years ago. Merchants crossed it every morning with carts of grain, wool "
           "and salt, and the tolls paid for the town walls, the market hall and a small school. When the railway "
           "arrived, the bridge lost its trade within a decade; the merchants moved to the station quarter and the "
           "old market hall became a library. Today the bridge is closed to cars, and the town holds a fair on it "
           "every autumn, when the river is low enough to walk along its banks and see the marks the floods left "
           "on the stones.")
#: label -> compress options (the strategy's own, as `gsrewrite compress -s int4` passes them)
VARIANTS: dict[str, dict[str, Any]] = {
    "gsrewrite rtn sym (the builder's numerics)": {"method": "rtn", "symmetric": True},
    "gsrewrite rtn asym": {"method": "rtn", "symmetric": False},
    "gsrewrite search sym, no activations": {"method": "search", "symmetric": True, "activations": False},
    "gsrewrite search asym, no activations": {"method": "search", "symmetric": False, "activations": False},
    "gsrewrite search asym (zero points everywhere)": {"method": "search", "symmetric": False},
    "gsrewrite search sym, zero points for the tied head": {"head_symmetric": False},
    "gsrewrite default (search sym)": {},
    "gsrewrite default, head/embedding 8 bits": {"head_bits": 8},
}
#: KV heads and head size of SmolLM2-135M (a graph that leaves them symbolic: the builder's)
KV = (3, 64)
TOKENIZE = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
prompts = json.loads(sys.stdin.read())
ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True) for p in prompts]
ids = [list(i["input_ids"]) if hasattr(i, "keys") else list(i) for i in ids]
print(json.dumps({"ids": ids, "eos": tok.convert_tokens_to_ids("<|im_end|>")}))
"""


def tokenize(python: str, hf: Path) -> tuple[list[list[int]], int]:
    done = subprocess.run([python, "-c", TOKENIZE, str(hf)], input=json.dumps(PROMPTS), capture_output=True,
                          text=True, check=True, timeout=600)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["ids"], int(answer["eos"])


def session(path: Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _feed(sess: Any, ids: list[int], past: dict[str, np.ndarray] | None, past_len: int) -> dict[str, np.ndarray]:
    """Inputs for ``ids`` after ``past_len`` cached tokens: empty caches when ``past`` is None."""
    feed: dict[str, np.ndarray] = {}
    for spec in sess.get_inputs():
        name = spec.name
        if name == "input_ids":
            feed[name] = np.array([ids], np.int64)
        elif name == "attention_mask":
            feed[name] = np.ones((1, past_len + len(ids)), np.int64)
        elif name == "position_ids":
            feed[name] = np.arange(past_len, past_len + len(ids), dtype=np.int64)[None]
        elif name.startswith("past_key_values"):
            if past is not None:
                feed[name] = past[name]
            else:
                heads, dim = (d if isinstance(d, int) else KV[i] for i, d in enumerate(spec.shape[1::2]))
                feed[name] = np.zeros((1, heads, 0, dim), np.float32)
        else:
            raise SystemExit(f"{name}: an input this script does not know")
    return feed


def greedy(path: Path, prompts: list[list[int]], tokens: int, eos: int | None) -> list[list[int]]:
    """The fp32 original's greedy continuation of each prompt (KV cache: present.i -> past_key_values.i)."""
    sess = session(path)
    outputs = [o.name for o in sess.get_outputs()]
    continuations = []
    for prompt in prompts:
        new, past, seen = list(prompt), None, 0
        made: list[int] = []
        for _ in range(tokens):
            result = dict(zip(outputs, sess.run(None, _feed(sess, new, past, seen)), strict=True))
            seen += len(new)
            past = {n.replace("present", "past_key_values"): v for n, v in result.items() if n.startswith("present")}
            token = int(result["logits"][0, -1].argmax())
            made.append(token)
            new = [token]
            if token == eos:
                break
        continuations.append(made)
    return continuations


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def teacher_forced(path: Path, prompts: list[list[int]], continuations: list[list[int]]) -> list[np.ndarray]:
    """Per prompt: the log-probabilities [continuation, vocab] of each continuation token's position."""
    sess = session(path)
    outputs = [o.name for o in sess.get_outputs()]
    index = outputs.index("logits")
    result = []
    for prompt, cont in zip(prompts, continuations, strict=True):
        ids = prompt + cont[:-1]
        logits = sess.run([outputs[index]], _feed(sess, ids, None, 0))[0][0]
        result.append(log_softmax(logits[len(prompt) - 1:]))
    del sess
    return result


def compare(reference: list[np.ndarray], other: list[np.ndarray]) -> tuple[float, float, int]:
    """Mean KL(reference || other) per position, top-1 agreement, positions."""
    kl, agree, count = 0.0, 0, 0
    for p, q in zip(reference, other, strict=True):
        kl += float((np.exp(p) * (p - q)).sum())
        agree += int((p.argmax(axis=-1) == q.argmax(axis=-1)).sum())
        count += p.shape[0]
    return kl / count, agree / count, count


def weight_bytes(path: Path) -> int:
    """The declared bytes of the model's initializers (what the quantization controls)."""
    import onnx

    from gsrewrite.model_io.tensors import initializer_bytes

    return initializer_bytes(onnx.load(path, load_external_data=False))


def file_bytes(path: Path) -> int:
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.exists() else 0)


def make_variant(src: Path, out: Path, options: dict[str, Any]) -> float:
    from gsrewrite.model_io.saving import save_model
    from gsrewrite.pipelines.compress import compress
    from gsrewrite.pipelines.options import Source

    start = time.perf_counter()
    result = compress(Source.mapped(src), "int4", validate=False, bench_runs=0, **options)
    seconds = time.perf_counter() - start
    save_model(result.model, out, external_data=True, weights_dir=result.weights_dir)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real", type=Path, default=HERE / "_work" / "real")
    parser.add_argument("--work", type=Path, default=HERE / "_work" / "int4_quality")
    parser.add_argument("--fixtures-python", default="/work/fxenv/bin/python")
    # 120 tokens (480 positions): at 40 (160) the top-1 margins the issue asks about were two positions, noise
    parser.add_argument("--tokens", type=int, default=120)
    parser.add_argument("--stop-at-eos", action="store_true", help="stop a continuation at the end-of-turn token")
    parser.add_argument("--only", nargs="*", help="gsrewrite variants to run (labels of VARIANTS)")
    parser.add_argument("--remake", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    src = args.real / "smollm2.dynamo_kv.onnx"
    args.work.mkdir(parents=True, exist_ok=True)

    prompts, eos = tokenize(args.fixtures_python, args.real / "smollm2_hf")
    continuations = greedy(src, prompts, args.tokens, eos if args.stop_at_eos else None)
    log.info("continuations: %s", [len(c) for c in continuations])
    reference = teacher_forced(src, prompts, continuations)

    rows: list[tuple[Any, ...]] = []
    models: list[tuple[str, Path, float | None]] = []
    for name in ("builder_fp32", "builder_int4"):
        path = args.real / name / "model.onnx"
        if path.exists():
            models.append((f"onnxruntime-genai builder {name.split('_')[1]}", path, None))
    for label, options in VARIANTS.items():
        if args.only and label not in args.only:
            continue
        out = args.work / ("".join(c if c.isalnum() else "_" for c in label) + ".onnx")
        made = 0.0
        if args.remake or not out.exists():
            log.info("making %s", label)
            made = make_variant(src, out, options)
        models.append((label, out, made))
    builder = next((file_bytes(p) for label, p, _ in models if label.endswith("builder int4")), None)
    builder_weights = next((weight_bytes(p) for label, p, _ in models if label.endswith("builder int4")), None)
    for label, path, seconds in models:
        log.info("running %s", label)
        kl, top1, _ = compare(reference, teacher_forced(path, prompts, continuations))
        size, weights = file_bytes(path), weight_bytes(path)
        shown = None if seconds is None else f"{seconds:.1f} s" if seconds else "reused"
        rows.append((label, f"{size / 2**20:.1f} MiB", f"{size / builder:.3f}x" if builder else None,
                     f"{weights / 1e6:.2f} MB", f"{weights / builder_weights:.3f}x" if builder_weights else None,
                     f"{kl:.3f}", f"{top1:.3f}", shown))
    print("# int4 quality on SmolLM2-135M-Instruct (real weights)\n")
    print(f"{len(prompts)} chat prompts, greedy continuations of {[len(c) for c in continuations]} tokens "
          f"({sum(len(c) for c in continuations)} positions) by the fp32 original; each model teacher-forced, "
          "compared per position with the fp32 original.\n")
    print(table(("model", "file", "vs builder int4", "weights", "vs builder int4", "KL(fp32 \\|\\| model)",
                 "top-1 agreement", "compress"), rows))
    print("\nfile: the .onnx and its .data; weights: the initializers' bytes (the dynamo export's files carry 4.3 MB "
          "of node metadata, stack traces, which compress keeps). compress: `gsrewrite.compress(..., validate=False, "
          "bench_runs=0)` in this process, once, the machine shared (minima of interleaved rounds: "
          "benchmarks/int4_compress_time.py).")


if __name__ == "__main__":
    main()
