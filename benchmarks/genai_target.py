"""``gsrewrite optimize --target genai`` on a real decoder (SmolLM2-135M), run by onnxruntime-genai's own loop.

    .venv/bin/python benchmarks/genai_target.py [--real benchmarks/_work/real] [--work DIR] [--runs 7] \
        > benchmarks/results/genai_target.md

The real export (``smollm2.dynamo_kv.onnx``, torch.export, fp32) and its Hugging Face folder (``smollm2_hf``: the
tokenizer, the config) come from ``--real``; onnxruntime-genai's model builder output (``builder_fp32``, made with
``python -m onnxruntime_genai.models.builder -m smollm2_hf -o builder_fp32 -p fp32 -e cpu`` when absent, in the
interpreter given by ``--builder-python``: the builder needs torch and transformers) is the peer.

1. The genai folder: ``gsrewrite optimize smollm2.dynamo_kv.onnx OUT --target genai --tokenizer smollm2_hf``.
2. Answers: "What is the capital of France?" through the chat template, greedy, in each folder; and the greedy
   tokens of the original export in onnxruntime (every input fed by name) for the same prompt.
3. Decode speed as the loop runs it: batch 1, 1 thread, a prompt of ``--past`` random token ids, then
   ``--steps`` tokens; per variant the median step of a run, min over ``--runs`` runs interleaved across the
   variants (CPU time of the calling thread, onnxruntime's 1-thread session runs there, and wall time): the
   builder's fp32, gsrewrite's (past and present one shared buffer, as its config says), the same
   model with the buffer not shared (``past_present_share_buffer`` false: the loop feeds the exact past and takes a
   new present every step), gsrewrite's with ``--contract int8-kv-cache`` and with ``--contract unpadded`` (no
   padding anywhere, GroupQueryAttention without the mask's bias; each when the contract was kept).
   ``search.max_length`` is ``--max-length`` for all.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markdown import machine_line, table

log = logging.getLogger("genai_target")
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
QUESTION = "What is the capital of France?"


def make_folders(real: Path, work: Path, builder_python: str) -> dict[str, Path]:
    """The builder's fp32 folder, gsrewrite's genai folder and the same with an int8 cache and with the unpadded
    contract (each made when absent; those only when their contract was kept)."""
    builder = real / "builder_fp32"
    folders = {"builder fp32": builder}
    for name, suffix, extra in (("gsrewrite genai", "", ()),
                                ("gsrewrite genai, int8 cache", "_int8", ("--contract", "int8-kv-cache")),
                                ("gsrewrite genai, unpadded", "_unpadded", ("--contract", "unpadded"))):
        folder = work / f"smollm2_genai{suffix}"
        if not (folder / "genai_config.json").exists():
            done = subprocess.run([str(GSREWRITE), "optimize", str(real / "smollm2.dynamo_kv.onnx"), str(folder),
                                   "--target", "genai", "--tokenizer", str(real / "smollm2_hf"), "--force", "--json",
                                   *extra], capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"gsrewrite optimize --target genai failed: {done.stderr.strip()}")
            (work / f"{folder.name}.json").write_text(done.stdout)
        kept = json.loads((work / f"{folder.name}.json").read_text())["contracts"]
        if extra and extra[-1] not in kept:
            log.warning("the contract %s was dropped: %s", extra[-1], folder)
            continue
        folders[name] = folder
    if not (builder / "genai_config.json").exists():
        builder = folders["builder fp32"] = work / "builder_fp32"
        subprocess.run([builder_python, "-m", "onnxruntime_genai.models.builder", "-m", str(real / "smollm2_hf"),
                        "-o", str(builder), "-p", "fp32", "-e", "cpu"], check=True, capture_output=True)
    return folders


def load(folder: Path, overlay: dict[str, Any]) -> Any:
    import onnxruntime_genai as og

    config = og.Config(str(folder))
    config.overlay(json.dumps(overlay))
    return og.Model(config)


def single_thread(max_length: int, shared: bool | None = None) -> dict[str, Any]:
    search: dict[str, Any] = {"max_length": max_length}
    if shared is not None:
        search["past_present_share_buffer"] = shared
    return {"model": {"decoder": {"session_options": {"intra_op_num_threads": 1, "inter_op_num_threads": 1}}},
            "search": search}


def answer(model: Any, tokens: int) -> tuple[list[int], list[int], str]:
    """The chat prompt's ids, the greedy tokens after it and their text."""
    import onnxruntime_genai as og

    tokenizer = og.Tokenizer(model)
    prompt = tokenizer.apply_chat_template(messages=json.dumps([{"role": "user", "content": QUESTION}]),
                                           add_generation_prompt=True)
    ids = [int(t) for t in tokenizer.encode(prompt)]
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + tokens)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    while not generator.is_done():
        generator.generate_next_token()
    out = [int(t) for t in generator.get_sequence(0)][len(ids):]
    return ids, out, tokenizer.decode(out)


def greedy_original(path: Path, prompt: list[int], count: int, stop: int) -> list[int]:
    """Greedy decoding of the original export in onnxruntime (1 thread), inputs fed by name, until ``stop``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    pasts = {i.name: i.shape for i in session.get_inputs() if i.name.startswith("past_key_values.")}
    cache = {name: np.zeros((1, shape[1], 0, shape[3]), np.float32) for name, shape in pasts.items()}
    tokens, new, generated = list(prompt), list(prompt), []
    for _ in range(count):
        start = len(tokens) - len(new)
        feed = {"input_ids": np.array([new], np.int64), "attention_mask": np.ones((1, len(tokens)), np.int64),
                "position_ids": np.arange(start, len(tokens), dtype=np.int64)[None], **cache}
        result = dict(zip(outputs, session.run(None, feed), strict=True))
        token = int(result["logits"][0, -1].argmax())
        if token == stop:  # as genai's loop: the end of the sequence is not one of its tokens
            break
        generated.append(token)
        tokens, new = [*tokens, token], [token]
        cache = {name: result[name.replace("past_key_values.", "present.")] for name in pasts}
    return generated


def decode_step_seconds(model: Any, past: int, steps: int, seed: int) -> tuple[float, float]:
    """The median CPU time of this thread (onnxruntime runs a 1-thread session on the caller's) and wall time of one
    ``generate_next_token`` after a prompt of ``past`` random token ids."""
    import onnxruntime_genai as og

    prompt = np.random.default_rng(seed).integers(100, 40000, past).astype(np.int32)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=past + steps + 1)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    cpu, wall = [], []
    for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.thread_time()
        generator.generate_next_token()
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    # the first call may still pick the prefill's token
    return statistics.median(cpu[1:]), statistics.median(wall[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, default=Path("benchmarks/_work/real"))
    parser.add_argument("--work", type=Path, default=Path("benchmarks/_work/genai"))
    parser.add_argument("--builder-python", default=sys.executable)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--past", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--steps", type=int, default=17)
    parser.add_argument("--max-length", type=int, default=2048)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    args.work.mkdir(parents=True, exist_ok=True)
    folders = make_folders(args.real, args.work, args.builder_python)

    print("# onnxruntime-genai as a target: SmolLM2-135M\n")
    print(machine_line() + "\n")
    rows = []
    original: list[int] | None = None
    for name, folder in folders.items():
        model = load(folder, single_thread(args.max_length))
        ids, tokens, text = answer(model, 32)
        if original is None:
            original = greedy_original(args.real / "smollm2.dynamo_kv.onnx", ids, 32, stop=2)
        same = tokens == original
        rows.append([name, repr(text), "yes" if "Paris" in text else "NO", "yes" if same else "no"])
        log.info("%s: %r", name, text)
        del model
    print(f"## \"{QUESTION}\" (chat template, greedy)\n")
    print(table(["folder", "answer", "Paris", "tokens = the original's greedy in onnxruntime"], rows) + "\n")

    variants = {"builder fp32": (folders["builder fp32"], None),
                "gsrewrite genai, shared buffer": (folders["gsrewrite genai"], True),
                "gsrewrite genai, not shared": (folders["gsrewrite genai"], False)}
    for name in ("gsrewrite genai, int8 cache", "gsrewrite genai, unpadded"):
        if name in folders:
            variants[f"{name}, shared buffer"] = (folders[name], True)
    models = {name: load(folder, single_thread(args.max_length, shared)) for name, (folder, shared) in
              variants.items()}
    cpu: dict[tuple[str, int], float] = {}
    wall: dict[tuple[str, int], float] = {}
    for run in range(args.runs):
        for past in args.past:
            for name, model in models.items():  # interleaved: every variant in every round
                step_cpu, step_wall = decode_step_seconds(model, past, args.steps, seed=run)
                cpu[name, past] = min(cpu.get((name, past), step_cpu), step_cpu)
                wall[name, past] = min(wall.get((name, past), step_wall), step_wall)
        log.info("round %d of %d", run + 1, args.runs)
    print(f"## Decode step as the loop runs it (batch 1, 1 thread, max_length {args.max_length}; median step of "
          f"{args.steps - 1}, min of {args.runs} interleaved runs)\n")
    print("CPU time of the calling thread (a 1-thread session computes there; robust to a shared machine's other "
          "work), then wall time; ratio to the builder's by CPU time.\n")
    rows = [[name, *[f"{cpu[name, past] * 1e3:.2f} ms ({cpu[name, past] / cpu['builder fp32', past]:.2f}x), "
                     f"wall {wall[name, past] * 1e3:.2f} ms" for past in args.past]] for name in models]
    print(table(["variant", *[f"past {past}" for past in args.past]], rows))


if __name__ == "__main__":
    main()
