"""``gsrewrite optimize MODEL OUTDIR --target genai --tokenizer DIR``: a folder onnxruntime-genai's generate loop runs
(through the installed console script and the real client), whose greedy tokens are those of greedy decoding of
the original export in onnxruntime; a model that is not a decoder with a KV cache is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gsrewrite.contracts import METADATA_KEY
from gsrewrite.pipelines.genai import GenaiOptions, genai_config

FIXTURES = Path(__file__).parent / "fixtures" / "models"
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
LLAMA = FIXTURES / "llama.dynamo_kv.onnx"
#: tokens generated after the prompt
NEW_TOKENS = 24
PROMPT = "the cat sat on the mat and"
WORDS = (
    "the", "cat", "dog", "sat", "on", "a", "mat", "and", "ran", "to", "big", "red", "blue", "house", "tree", "sun",
    "moon", "day", "night", "went", "saw", "bird", "fish", "green", "small", "old", "new", "river", "hill", "road",
    "boat", "rain", "snow", "wind", "star", "sky", "field", "stone",
)


def make_tokenizer(folder: Path) -> Path:
    """A byte-level BPE tokenizer of exactly 100 tokens (the fixture's vocabulary) trained on sentences of a few
    words, saved as transformers does (tokenizer.json, tokenizer_config.json). onnxruntime-genai's tokenizer reads
    BPE (not WordLevel: 'Cannot know how to parse line'), so the words are merges of their letters."""
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizer is made with `tokenizers` (dev extra)")
    corpus = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(12)) for i in range(200)]
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=100, special_tokens=["<unk>", "<s>", "</s>"],
                                             show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer)
    assert tokenizer.get_vocab_size() == 100
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def greedy_original(model: Path, prompt: list[int], count: int) -> list[int]:
    """Greedy decoding of ``model`` in onnxruntime: a prefill of the prompt, then one token at a time, every input
    fed by name, each present fed back as the past."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    pasts = {i.name: i.shape for i in session.get_inputs() if i.name.startswith("past_key_values.")}
    cache = {name: np.zeros((1, shape[1], 0, shape[3]), np.float32) for name, shape in pasts.items()}
    tokens, new = list(prompt), list(prompt)
    generated: list[int] = []
    for _ in range(count):
        start = len(tokens) - len(new)
        feed = {"input_ids": np.array([new], np.int64), "attention_mask": np.ones((1, len(tokens)), np.int64),
                "position_ids": np.arange(start, len(tokens), dtype=np.int64)[None], **cache}
        result = dict(zip(outputs, session.run(None, feed), strict=True))
        token = int(result["logits"][0, -1].argmax())
        generated.append(token)
        tokens.append(token)
        new = [token]
        cache = {name: result[name.replace("past_key_values.", "present.")] for name in pasts}
    return generated


def greedy_genai(folder: Path, count: int) -> tuple[list[int], list[int], str]:
    """The prompt's tokens, the tokens onnxruntime-genai's loop generates greedily after it, and their text."""
    og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (dev extra) is not installed")
    model = og.Model(str(folder))
    tokenizer = og.Tokenizer(model)
    prompt = [int(t) for t in tokenizer.encode(PROMPT)]
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + count)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    generated = [int(t) for t in generator.get_sequence(0)][len(prompt):]
    return prompt, generated, tokenizer.decode(generated)


def optimize_for_genai(tmp_path: Path, *extra: str) -> tuple[Path, dict]:
    tokenizer = make_tokenizer(tmp_path / "tokenizer")
    folder = tmp_path / "genai"
    done = subprocess.run([str(GSREWRITE), "optimize", str(LLAMA), str(folder), "--target", "genai", "--tokenizer",
                           str(tokenizer), "--json", *extra], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return folder, json.loads(done.stdout)


@pytest.mark.parametrize("contracts", [(), ("int8-kv-cache",), ("unpadded",)], ids=["float", "int8-kv", "unpadded"])
def test_genai_folder_generates_the_originals_greedy_tokens(tmp_path: Path, contracts: tuple[str, ...]) -> None:
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (dev extra) is not installed")
    page = tmp_path / "report.html"
    folder, report = optimize_for_genai(tmp_path, *[a for c in contracts for a in ("--contract", c)],
                                        "--report", str(page))
    expected = sorted({"batch1-chunks", "shared-kv-buffer", *contracts})
    assert sorted(report["contracts"]) == expected and report["validation"]["ok"]
    html = page.read_text(encoding="utf-8")  # the report of the folder's model: its fused regions and contracts
    assert html.lower().startswith("<!doctype html>") and "GroupQueryAttention" in html
    assert all(name in html for name in expected)
    assert {p.name for p in folder.iterdir()} == {"model.onnx", "model.onnx.data", "genai_config.json",
                                                    "tokenizer.json", "tokenizer_config.json"}
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    stated = {p.key: p.value for p in model.metadata_props}[METADATA_KEY]
    assert all(f"{name}:" in stated for name in expected)
    config = json.loads((folder / "genai_config.json").read_text())
    assert config == report["genai_config"]
    decoder = config["model"]["decoder"]
    assert (decoder["num_hidden_layers"], decoder["num_key_value_heads"], decoder["head_size"],
            decoder["num_attention_heads"], decoder["hidden_size"]) == (4, 2, 8, 4, 32)
    assert decoder["inputs"] == {"input_ids": "input_ids", "attention_mask": "attention_mask",
                                 "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                                 "past_value_names": "past_key_values.%d.value"}
    assert decoder["outputs"] == {"logits": "logits", "present_key_names": "present.%d.key",
                                  "present_value_names": "present.%d.value"}
    assert {k: config["model"][k] for k in ("type", "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id")} \
        == {"type": "decoder", "vocab_size": 100, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    assert config["search"]["past_present_share_buffer"] is True and config["search"]["do_sample"] is False
    prompt, generated, text = greedy_genai(folder, NEW_TOKENS)
    assert len(generated) == NEW_TOKENS and text
    expected = greedy_original(LLAMA, prompt, NEW_TOKENS)
    if "unpadded" in contracts:  # GroupQueryAttention takes no bias from the mask: it applies its own causal mask
        attention = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
        assert attention and all(len(n.input) <= 10 for n in attention), [list(n.input) for n in attention]
    if "int8-kv-cache" not in contracts:
        assert generated == expected
    else:  # int8 rounding may flip one of this random-weight model's near-tie logits late in the run
        agreed = next((i for i, (a, b) in enumerate(zip(generated, expected, strict=True)) if a != b), NEW_TOKENS)
        assert agreed >= 16, (generated, expected)


@pytest.mark.parametrize(("model", "says"), [
    ("bert.dynamo.onnx", "needs a decoder with a KV cache"),
    ("whisper.dynamo_kv.onnx", "not 'encoder_hidden_states'"),
])
def test_a_model_genai_cannot_run_is_refused_in_one_line(tmp_path: Path, model: str, says: str) -> None:
    done = subprocess.run([str(GSREWRITE), "optimize", str(FIXTURES / model), str(tmp_path / "out"), "--target",
                           "genai"], capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "says"), [
    (("--max-length", "64"), "--max-length is an option of --contract shared-kv-buffer and --target genai"),
    (("--context-length", "64"), "--context-length is an option of --target genai"),
])
def test_genai_options_are_refused_for_other_targets(tmp_path: Path, option: tuple[str, str], says: str) -> None:
    done = subprocess.run([str(GSREWRITE), "optimize", str(LLAMA), str(tmp_path / "out.onnx"), *option],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and says in done.stderr, done.stderr


def test_genai_config_is_read_from_the_graph() -> None:
    gpt2 = onnx.load(str(FIXTURES / "gpt2.dynamo_kv.onnx"))
    config = genai_config(gpt2, (), GenaiOptions())
    model, decoder = config["model"], config["model"]["decoder"]
    # GPT-2's position table has 128 rows: the context; no tokenizer: no special tokens; a cache of its own length
    assert model["context_length"] == 128 and config["search"]["max_length"] == 128
    assert not {"bos_token_id", "eos_token_id", "pad_token_id"} & set(model)
    assert config["search"]["past_present_share_buffer"] is False
    assert (decoder["num_hidden_layers"], decoder["num_key_value_heads"], decoder["head_size"]) == (4, 4, 8)
    assert decoder["hidden_size"] == 32 and decoder["num_attention_heads"] == 4
    assert genai_config(gpt2, (), GenaiOptions(context_length=64, max_length=32))["search"]["max_length"] == 32


def test_genai_outputs_are_folders() -> None:
    from gsrewrite.cli._jobs import plan_jobs

    assert [j.output for j in plan_jobs(["a/m.onnx"], None, force=False, folders=True)] == ["a/m.genai"]
    assert [j.output for j in plan_jobs(["a/m.onnx", "out"], None, force=False, folders=True)] == ["out"]
    several = plan_jobs(["a/m.onnx", "b/n.onnx"], str(FIXTURES) + "/", force=False, folders=True)
    assert [j.output for j in several] == [str(FIXTURES / "m"), str(FIXTURES / "n")]
