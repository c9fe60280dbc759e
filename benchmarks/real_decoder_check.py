"""SmolLM2-135M-Instruct (real weights) through ``gsrewrite optimize`` as users run it: what fused, what validation
kept, and whether greedy text along real chat prompts is unchanged (issue 32 item 1).

    /work/fxenv/bin/python benchmarks/real_decoder_check.py [--real benchmarks/_work/real] [--gsrewrite PATH]

Needs the models of ``benchmarks/make_real_models.py`` (``smollm2.dynamo_kv.onnx`` and ``smollm2_hf/`` for the
tokenizer) and transformers in the running interpreter (for the chat template only); gsrewrite runs as the installed
console script. For each variant (the default contract, ``--contract batch1-chunks``, ``--compress int4``) it
writes the fused model, then greedy-decodes the four prompts with the original and the variant in onnxruntime
(inputs by name) and teacher-forces the original's continuation through the variant: top-1 agreement and KL.
Writes ``benchmarks/results/real_decoder_check.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _real_models import ort_loop  # noqa: E402
from _real_models.prompts import LONG, QUESTIONS  # noqa: E402

log = logging.getLogger("real_decoder_check")
MAX_NEW = 40
VARIANTS = {"default": [], "batch1-chunks": ["--contract", "batch1-chunks"],
            # int4 of a 135M model changes the argmax of ~half the text-window rows: its default tolerance
            # (top-1 95%) cannot hold, so the measurement below decides. The last layer's value cache on a
            # random-token prefill sits at cosine 0.80 (0.7994 with the symmetric default and the tied table
            # quantized, which bisection then leaves float: 180 MB), hence 0.7
            "int4": ["--compress", "int4", "--min-top1", "0.3", "--min-cosine", "0.7"]}


def chat_ids(tokenizer: object, question: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}],  # type: ignore[attr-defined]
                                         add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])  # type: ignore[operator]


def optimized(gsrewrite: str, model: Path, out: Path, extra: list[str]) -> dict:
    start = time.perf_counter()
    done = subprocess.run([gsrewrite, "optimize", str(model), str(out), "--force", "--json", *extra],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"gsrewrite optimize {' '.join(extra)} failed: {done.stderr.strip().splitlines()[-1]}")
    data = json.loads(done.stdout)
    data["wall"] = time.perf_counter() - start
    return data


def teacher_forced(session: object, ids: list[int], continuation: list[int]) -> np.ndarray:
    """The next-token logits at every position of the continuation (one prefill of prompt + continuation)."""
    logits, _ = ort_loop.step(session, np.array([ids + continuation[:-1]], np.int64),
                              ort_loop.empty_past(session))  # type: ignore[arg-type]
    return logits[0, len(ids) - 1:]


def compare(reference: np.ndarray, other: np.ndarray) -> tuple[float, float, float]:
    """(top-1 agreement, mean KL(reference || other), max abs logits difference)."""
    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64) - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))
    p, q = log_softmax(reference), log_softmax(other)
    kl = float((np.exp(p) * (p - q)).sum(-1).mean())
    return float((reference.argmax(-1) == other.argmax(-1)).mean()), kl, float(np.abs(reference - other).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, default=HERE / "_work" / "real")
    parser.add_argument("--gsrewrite", default=shutil.which("gsrewrite") or str(HERE.parent / ".venv/bin/gsrewrite"))
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.real / "smollm2_hf")
    eos = {int(tokenizer.eos_token_id)}
    model = args.real / "smollm2.dynamo_kv.onnx"
    work = HERE / "_work" / "real_check"
    work.mkdir(parents=True, exist_ok=True)
    original = ort_loop.session(model)
    prompts = [chat_ids(tokenizer, q) for q in (*QUESTIONS, LONG)]
    greedy = [ort_loop.greedy(original, ids, MAX_NEW, eos) for ids in prompts]
    forced = [teacher_forced(original, ids, new) for ids, new in zip(prompts, greedy, strict=True)]
    rows = []
    for name in args.variants:
        out = work / f"smollm2.{name}.onnx"
        data = optimized(args.gsrewrite, model, out, VARIANTS[name])
        session = ort_loop.session(out)
        same = sum(ort_loop.greedy(session, ids, MAX_NEW, eos) == new for ids, new in zip(prompts, greedy,
                                                                                            strict=True))
        metrics = [compare(f, teacher_forced(session, ids, new))
                   for f, ids, new in zip(forced, prompts, greedy, strict=True)]
        top1, kl, _max_abs = (float(np.mean([m[i] for m in metrics])) for i in range(3))
        text = tokenizer.decode(ort_loop.greedy(session, prompts[0], MAX_NEW, eos), skip_special_tokens=True)
        rows.append((name, data, same, top1, kl, max(m[2] for m in metrics), text, out.stat().st_size))
        log.info("%s: %s rewrites, dropped %s, greedy same %d/%d, top-1 %.3f, KL %.4f", name,
                 sum(data["counts"].values()), list(data["dropped"]), same, len(prompts), top1, kl)
    write(rows, len(prompts), tokenizer.decode(greedy[0], skip_special_tokens=True))


def write(rows: list, prompts: int, reference_text: str) -> None:
    lines = ["# SmolLM2-135M-Instruct through `gsrewrite optimize` (real weights)", "",
             "Made by `benchmarks/real_decoder_check.py`: the torch dynamo export with a KV cache "
             "(`benchmarks/make_real_models.py`), optimized by the installed script; greedy decoding of "
             f"{prompts} chat prompts ({MAX_NEW} new tokens) in onnxruntime (ORT_DISABLE_ALL), and the original's "
             "continuation teacher-forced through each variant (top-1 agreement, mean KL(original || variant), "
             "max abs logits difference).", "",
             f"Original on \"What is the capital of France?\": {reference_text!r}", "",
             "| variant | rewrites kept | dropped | validation | greedy text unchanged | top-1 | KL | max abs | "
             "size MB | optimize s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, data, same, top1, kl, max_abs, _text, size in rows:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(data["counts"].items()))
        verdict = (data.get("validation") or {}).get("summary", "")[:60]
        lines.append(f"| {name} | {sum(data['counts'].values())} ({counts}) | {', '.join(data['dropped']) or '-'} "
                     f"| {verdict} | {same}/{prompts} | {top1:.3f} | {kl:.4f} | {max_abs:.3g} | {size / 1e6:.1f} "
                     f"| {data['wall']:.1f} |")
    lines += ["", *[f"- {name} on the France prompt: {text!r}" for name, _d, _s, _t, _k, _m, text, _z in rows]]
    (HERE / "results" / "real_decoder_check.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
