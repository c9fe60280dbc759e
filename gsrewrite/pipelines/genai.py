"""onnxruntime-genai as a target: ``optimize(model, target="genai")`` fuses for onnxruntime under the contracts
genai's generate loop lives with (:data:`~gsrewrite.contracts.GENAI_CONTRACTS`), and :func:`save_genai` writes the
folder the loop runs: the model and its data, ``genai_config.json``, and the tokenizer's files when a tokenizer
folder is named (docs/genai.md).

Everything in ``genai_config.json`` is read from the graph (:mod:`gsrewrite.pipelines.decoder_signature`): the
layers from the past inputs, KV heads and head size from their shapes, attention heads from the fused attention,
the vocabulary from the logits, the hidden size from the token embedding, the context length from the position
tables (else the tokenizer folder's ``config.json``, else :data:`DEFAULT_CONTEXT_LENGTH`), the input and output
names as the model has them; the special tokens from the tokenizer folder. The model type is ``decoder``:
onnxruntime-genai's generic decoder-only model, which runs any of them (``gpt2`` would select its GPT-2 class,
the others only name the same class).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from gsrewrite.contracts import GENAI_CONTRACTS, check_contracts
from gsrewrite.errors import OutputError, UsageError
from gsrewrite.pipelines.decoder_signature import DecoderSignature, decoder_signature
from gsrewrite.pipelines.options import RewriteOptions
from gsrewrite.pipelines.rotary_tables import tables_of

log = logging.getLogger(__name__)

GENAI_TARGET = "genai"
#: the context length when the graph has no position table and no ``--context-length`` or config.json says
DEFAULT_CONTEXT_LENGTH = 4096
MODEL_FILE = "model.onnx"
CONFIG_FILE = "genai_config.json"
#: the files of a tokenizer folder copied next to the model (those that exist)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model")
_WHAT = "--target genai"


@dataclass(frozen=True)
class GenaiOptions:
    """What the folder adds to the model: ``tokenizer`` (a folder with ``tokenizer.json``, as transformers saves it),
    ``context_length`` (None: from the graph), ``max_length`` (the longest sequence the loop generates, the shared
    cache buffer's length; None: the context length)."""

    tokenizer: str | os.PathLike[str] | None = None
    context_length: int | None = None
    max_length: int | None = None

    def check(self) -> None:
        """:class:`UsageError` for a tokenizer folder without ``tokenizer.json`` or lengths below 1."""
        if self.tokenizer is not None and not (Path(self.tokenizer) / "tokenizer.json").is_file():
            raise UsageError(f"--tokenizer {os.fspath(self.tokenizer)!r}: no tokenizer.json in that folder")
        for name in ("context_length", "max_length"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.context_length and self.max_length and self.max_length > self.context_length:
            raise UsageError(f"--max-length {self.max_length} is longer than --context-length {self.context_length}")


def with_genai_contracts(options: RewriteOptions, signature: DecoderSignature | None = None) -> RewriteOptions:
    """``options`` with the contracts the genai loop lives with added to the user's, and (given the model's
    ``signature``) the longest sequence it runs when unset: the buffer's length, else the model's position
    tables' rows, else :data:`DEFAULT_CONTEXT_LENGTH` (what :func:`genai_config` states without a tokenizer)."""
    options = dataclasses.replace(options, contracts=check_contracts([*GENAI_CONTRACTS, *options.contracts]))
    if signature is not None and options.positions is None:
        positions = options.max_length or signature.position_rows or DEFAULT_CONTEXT_LENGTH
        options = dataclasses.replace(options, positions=positions)
    return options


def longest_sequence(options: GenaiOptions) -> int | None:
    """What a genai folder made with ``options`` runs at most, as far as they tell without the model: the
    buffer's length, the context length or the tokenizer folder's ``config.json`` (``max_position_embeddings``)."""
    rows = _read_json(options.tokenizer, "config.json").get("max_position_embeddings")
    return options.max_length or options.context_length or (rows if isinstance(rows, int) and rows > 0 else None)


def check_genai_model(model: onnx.ModelProto) -> DecoderSignature:
    """``model``'s signature; :class:`UsageError` when genai's loop cannot run it (not a decoder with a KV cache,
    or an input the loop does not feed)."""
    signature = decoder_signature(model, _WHAT)
    fed = {signature.input_ids, signature.attention_mask, signature.position_ids, *signature.pairs}
    initializers = {t.name for t in model.graph.initializer}
    other = [i.name for i in model.graph.input if i.name not in fed and i.name not in initializers]
    if other:
        raise UsageError(f"{_WHAT}: onnxruntime-genai's loop feeds token ids, the attention mask, position ids and "
                         f"the cache, not {', '.join(repr(n) for n in other)}")
    return signature


def check_folder(folder: str | os.PathLike[str], force: bool = False) -> Path:
    """The output folder, checked before any work: its parent exists, and it holds no genai model unless
    ``force``."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise OutputError(f"'{path}' is a file: --target genai writes a folder")
    if not path.parent.is_dir():
        raise OutputError(f"cannot write into '{path}': no folder '{path.parent}'")
    if not force and any((path / name).exists() for name in (MODEL_FILE, CONFIG_FILE)):
        raise OutputError(f"'{path}' holds a model already: add --force to overwrite it")
    return path


def genai_config(model: onnx.ModelProto, contracts: Sequence[str], options: GenaiOptions,
                 original: onnx.ModelProto | None = None) -> dict[str, Any]:
    """``genai_config.json`` for ``model`` (its ``contracts``, :mod:`gsrewrite.contracts`, say whether the cache is
    one shared buffer). ``original``: the model it was rewritten from, whose inputs still say how the cache relates
    to the mask (a shared buffer's no longer do); its names are ``model``'s."""
    signature = decoder_signature(original if original is not None else model, _WHAT)
    hf = _read_json(options.tokenizer, "config.json")
    context = options.context_length or signature.position_rows or hf.get("max_position_embeddings") \
        or DEFAULT_CONTEXT_LENGTH
    tables = tables_of(model).values()  # constant rotary tables: no position at or beyond their rows
    longest = min(options.max_length or context, context, *tables)
    heads = _attention_heads(model)
    hidden = _hidden_size(model, signature) or (heads or 0) * signature.head_size
    inputs = {"input_ids": signature.input_ids}
    if signature.attention_mask is not None:
        inputs["attention_mask"] = signature.attention_mask
    if signature.position_ids is not None:
        inputs["position_ids"] = signature.position_ids
    inputs.update({k: signature.templates[k] for k in ("past_key_names", "past_value_names")})
    outputs = {"logits": signature.logits,
               **{k: signature.templates[k] for k in ("present_key_names", "present_value_names")}}
    decoder = {"session_options": {"log_id": "onnxruntime-genai", "provider_options": []}, "filename": MODEL_FILE,
               "head_size": signature.head_size, "hidden_size": hidden, "inputs": inputs, "outputs": outputs,
               "num_attention_heads": heads or hidden // signature.head_size,
               "num_hidden_layers": len(signature.layers), "num_key_value_heads": signature.kv_heads}
    model_entry = {**_special_tokens(options.tokenizer, hf), "context_length": context, "decoder": decoder,
                   "type": "decoder", "vocab_size": signature.vocab_size}
    search = {"diversity_penalty": 0.0, "do_sample": False, "early_stopping": True, "length_penalty": 1.0,
              "max_length": longest, "min_length": 0,
              "no_repeat_ngram_size": 0, "num_beams": 1, "num_return_sequences": 1,
              "past_present_share_buffer": "shared-kv-buffer" in contracts, "repetition_penalty": 1.0,
              "temperature": 1.0, "top_k": 50, "top_p": 1.0}
    return {"model": dict(sorted(model_entry.items())), "search": search}


def save_genai(result: Any, folder: str | os.PathLike[str], *, tokenizer: str | os.PathLike[str] | None = None,
               context_length: int | None = None, max_length: int | None = None, force: bool = False,
               input_path: str | os.PathLike[str] | None = None) -> list[str]:
    """Write the folder onnxruntime-genai runs for ``result`` (of ``optimize(..., target="genai")``): the model
    with its data (``model.onnx``, ``model.onnx.data``), ``genai_config.json`` and the tokenizer's files; the
    paths written. ``input_path``: the model ``result`` was read from (never overwritten)."""
    from gsrewrite.model_io import save_model

    options = GenaiOptions(tokenizer, context_length, max_length)
    options.check()
    path = check_folder(folder, force)
    config = genai_config(result.model, result.contracts, options, result.original)
    path.mkdir(exist_ok=True)
    model_path = path / MODEL_FILE
    save_model(result.model, model_path, input_path=input_path, external_data=True, weights_dir=result.weights_dir)
    written = [str(model_path)]
    if (path / f"{MODEL_FILE}.data").exists():
        written.append(str(path / f"{MODEL_FILE}.data"))
    (path / CONFIG_FILE).write_text(json.dumps(config, indent=4) + "\n", encoding="utf-8")
    written.append(str(path / CONFIG_FILE))
    result.genai = config
    if tokenizer is not None:
        for name in TOKENIZER_FILES:
            source = Path(tokenizer) / name
            if source.is_file():
                shutil.copyfile(source, path / name)
                written.append(str(path / name))
    else:
        log.warning("no --tokenizer: genai_config.json names no special tokens and the folder has no tokenizer")
    return written


def _attention_heads(model: onnx.ModelProto) -> int | None:
    """``num_heads`` of the fused attention (GroupQueryAttention, MultiHeadAttention, Attention)."""
    for node in model.graph.node:
        if node.op_type in ("GroupQueryAttention", "MultiHeadAttention", "Attention"):
            for attr in node.attribute:
                if attr.name in ("num_heads", "q_num_heads"):
                    return int(attr.i)
    return None


#: ops that pass token ids on unchanged in value (an exporter's flatten before the embedding lookup)
_ID_CARRIERS = frozenset({"Reshape", "Cast", "Unsqueeze", "Squeeze", "Flatten", "Identity"})


def _hidden_size(model: onnx.ModelProto, signature: DecoderSignature) -> int | None:
    """The width of the token embedding: the table the token ids index (through reshapes and casts)."""
    tables = {t.name: t for t in model.graph.initializer if len(t.dims) == 2}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    ids, seen = [signature.input_ids], set()
    while ids:
        name = ids.pop()
        for node in consumers.get(name, []):
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name \
                    and node.input[0] in tables:
                return int(tables[node.input[0]].dims[1])
            if node.op_type in _ID_CARRIERS and node.input[0] == name and node.output[0] not in seen:
                seen.add(node.output[0])
                ids.append(node.output[0])
    return None


def _special_tokens(tokenizer: str | os.PathLike[str] | None, hf: Mapping[str, Any]) -> dict[str, Any]:
    """``bos_token_id``, ``eos_token_id``, ``pad_token_id`` from the tokenizer folder: generation_config.json, then
    config.json, then tokenizer_config.json's tokens looked up in tokenizer.json."""
    if tokenizer is None:
        return {}
    generation = _read_json(tokenizer, "generation_config.json")
    named = _read_json(tokenizer, "tokenizer_config.json")
    ids = _token_ids(_read_json(tokenizer, "tokenizer.json"))
    out: dict[str, Any] = {}
    for key in ("bos", "eos", "pad"):
        value = generation.get(f"{key}_token_id", hf.get(f"{key}_token_id"))
        if value is None:
            token = named.get(f"{key}_token")
            token = token.get("content") if isinstance(token, dict) else token
            value = ids.get(token) if isinstance(token, str) else None
        if value is not None:
            out[f"{key}_token_id"] = value
    if "pad_token_id" not in out and "eos_token_id" in out:
        eos = out["eos_token_id"]
        out["pad_token_id"] = eos[0] if isinstance(eos, list) else eos
    return out


def _token_ids(tokenizer: Mapping[str, Any]) -> dict[str, int]:
    vocab = tokenizer.get("model", {}).get("vocab", {})
    ids = dict(vocab) if isinstance(vocab, dict) else {}
    ids.update({t["content"]: t["id"] for t in tokenizer.get("added_tokens", []) if "content" in t and "id" in t})
    return ids


def _read_json(folder: str | os.PathLike[str] | None, name: str) -> dict[str, Any]:
    if folder is None or not (Path(folder) / name).is_file():
        return {}
    try:
        data = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--tokenizer: cannot read {name}: {exc}") from None
    return data if isinstance(data, dict) else {}
