"""gqa-past-window: a sliding-window causal bias over a KV cache (Mistral's), proven for every length the model can
run, becomes GroupQueryAttention causal = 1, local_window_size = W, only under the contracts it is exact under:
batch1-chunks (it is GroupQueryAttention) and unpadded-queries (the original spreads a padded query over all keys,
the op over its window). Without them the window stays in the additive bias (GroupQueryAttention causal 0, or
MultiHeadAttention): never plain causal, a computed window of 200 keys included.

The block is a grouped-query decoder layer as transformers exports it with a cache: Q/K/V projected from the hidden
states, the new K/V appended to the past and repeated per group, the bias computed from the 2-D attention mask
(key j visible to query i, at absolute position past + i, when the mask keeps j and 0 <= past + i - j < W).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gsrewrite.contracts import METADATA_KEY
from gsrewrite.errors import PatternError
from gsrewrite.patterns import default_registry
from gsrewrite.patterns.registry import PatternRegistry
from gsrewrite.pipelines import RewriteOptions, ValidationOptions
from gsrewrite.pipelines.apply import Fusions, RewriteResult, apply_fusions
from gsrewrite.testing import model_from_text
from gsrewrite.validation.validator import Validator

HEADS, KV_HEADS, DH, HIDDEN, WINDOW = 4, 2, 8, 16, 4
CONTRACTS = ("batch1-chunks", "unpadded-queries")
PATTERNS = ["gqa-past-window", "gqa-past", "gqa-past-own-lengths", "mha-4d"]

REPEAT_KV = """
      {x}s = Shape ({x})
      {x}lead = Slice ({x}s, zero_1, two_1)
      {x}tail = Slice ({x}s, two_1, four_1)
      {x}et = Concat <axis = 0> ({x}lead, rep_1, {x}tail)
      {x}b = Slice ({x}s, zero_1, one_1)
      {x}rt = Concat <axis = 0> ({x}b, heads_1, {x}tail)
      {x}u = Unsqueeze ({x}, two_1)
      {x}5 = Expand ({x}u, {x}et)
      {x}4 = Reshape ({x}5, {x}rt)
"""
#: the window as a constant: key j is in query i's window when i - j < 4
CONSTANT_WINDOW = """
      near = Less (diff, win_i)
"""
#: the window computed from the length so that nothing folds it: Exp(ln 200 + 0 * n) = 200 (a threshold past
#: 200 that no constant of the graph shows; tests/patterns/test_length_proofs.py has the mask-only variants)
EXP_WINDOW = """
      nf = Cast <to = 1> (total)
      z = Mul (nf, f0)
      lw = Add (z, ln200)
      win = Exp (lw)
      df = Cast <to = 1> (diff)
      near = Less (df, win)
"""
POW_WINDOW = EXP_WINDOW.replace("Add (z, ln200)", "Add (z, log2_200)").replace("Exp (lw)", "Pow (two_f, lw)")
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
NAMES = {"pastk": "past_key_values.0.key", "pastv": "past_key_values.0.value", "presk": "present.0.key",
         "presv": "present.0.value"}


def _decoder(window: str = CONSTANT_WINDOW) -> onnx.ModelProto:
    """One cached grouped-query block whose bias is a sliding window (``window`` computes ``near`` from ``diff``,
    the query's absolute position less the key's) over the attention mask's padding."""
    text = f"""
    agraph (float[batch, seq, {HIDDEN}] x, int64[batch, total] attention_mask,
            float[batch, {KV_HEADS}, past, {DH}] pastk, float[batch, {KV_HEADS}, past, {DH}] pastv)
         => (float[batch, seq, {HEADS * DH}] out, float[batch, {KV_HEADS}, total, {DH}] presk,
             float[batch, {KV_HEADS}, total, {DH}] presv) {{
      ms = Shape (attention_mask)
      total = Gather <axis = 0> (ms, one)
      xs = Shape (x)
      seqlen = Gather <axis = 0> (xs, one)
      pastlen = Sub (total, seqlen)
      kpos = Range (zero, total, one)
      qpos = Range (pastlen, total, one)
      qcol = Unsqueeze (qpos, one_1)
      diff = Sub (qcol, kpos)
      causal = GreaterOrEqual (diff, zero)
      {window}
      band = And (causal, near)
      band4 = Unsqueeze (band, zero_one)
      mb = Cast <to = 9> (attention_mask)
      mb4 = Unsqueeze (mb, one_two)
      keep = And (band4, mb4)
      bias = Where (keep, f0, low)
      qm = MatMul (x, wq)
      q3 = Reshape (qm, qshape)
      q4 = Transpose <perm = [0, 2, 1, 3]> (q3)
      km = MatMul (x, wk)
      k3 = Reshape (km, kvshape)
      kk = Transpose <perm = [0, 2, 1, 3]> (k3)
      vm = MatMul (x, wv)
      v3 = Reshape (vm, kvshape)
      vv = Transpose <perm = [0, 2, 1, 3]> (v3)
      presk = Concat <axis = -2> (pastk, kk)
      presv = Concat <axis = -2> (pastv, vv)
      {REPEAT_KV.format(x="presk")}
      {REPEAT_KV.format(x="presv")}
      kt = Transpose <perm = [0, 1, 3, 2]> (presk4)
      m = MatMul (q4, kt)
      s = Mul (m, c)
      sm = Add (s, bias)
      p = Softmax <axis = -1> (sm)
      ctx = MatMul (p, presv4)
      ct4 = Transpose <perm = [0, 2, 1, 3]> (ctx)
      out = Reshape (ct4, oshape)
    }}
    """
    rng = np.random.default_rng(0)
    model = model_from_text(text, initializers={
        "wq": rng.standard_normal((HIDDEN, HEADS * DH)).astype(np.float32) * 0.5,
        "wk": rng.standard_normal((HIDDEN, KV_HEADS * DH)).astype(np.float32) * 0.5,
        "wv": rng.standard_normal((HIDDEN, KV_HEADS * DH)).astype(np.float32),
        "qshape": np.array([0, 0, HEADS, DH], np.int64), "kvshape": np.array([0, 0, KV_HEADS, DH], np.int64),
        "oshape": np.array([0, 0, HEADS * DH], np.int64), "c": np.array(DH ** -0.5, np.float32),
        "zero": np.array(0, np.int64), "one": np.array(1, np.int64), "win_i": np.array(WINDOW, np.int64),
        "zero_1": np.array([0], np.int64), "one_1": np.array([1], np.int64), "two_1": np.array([2], np.int64),
        "four_1": np.array([4], np.int64), "zero_one": np.array([0, 1], np.int64),
        "one_two": np.array([1, 2], np.int64), "rep_1": np.array([HEADS // KV_HEADS], np.int64),
        "heads_1": np.array([HEADS], np.int64), "f0": np.array(0.0, np.float32),
        "low": np.array(np.finfo(np.float32).min, np.float32), "ln200": np.array(math.log(200.0), np.float32),
        "log2_200": np.array(math.log2(200.0), np.float32), "two_f": np.array(2.0, np.float32),
    })
    for value in [*model.graph.input, *model.graph.output]:  # the text syntax has no dim expressions
        value.name = NAMES.get(value.name, value.name)
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param == "total":
                dim.dim_param = "past + seq"
    for node in model.graph.node:
        node.input[:] = [NAMES.get(n, n) for n in node.input]
        node.output[:] = [NAMES.get(n, n) for n in node.output]
    return model


def _fuse(model: onnx.ModelProto, contracts: tuple[str, ...], validate: bool = True) -> RewriteResult:
    options = RewriteOptions(explain=True, contracts=contracts)
    return apply_fusions(model, Fusions(PATTERNS, options=options), ValidationOptions() if validate else False)


def _attention(model: onnx.ModelProto) -> list[tuple[str, dict[str, object], list[str]]]:
    return [(n.op_type, {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}, list(n.input))
            for n in model.graph.node if n.op_type in ("GroupQueryAttention", "MultiHeadAttention", "Attention")]


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def _step(batch: int, new: int, past: int, past_holes: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    """A step of ``new`` tokens after ``past`` (a random cache), every new token visible; the past's mask padded
    on the left of row 1 and holed in the last row (``past_holes``)."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, past + new), np.int64)
    if past_holes and past > 1 and batch > 1:
        mask[1, :min(past - 1, 3)] = 0
        mask[-1, past // 2] = 0
    cache = (batch, KV_HEADS, past, DH)
    return {"x": rng.standard_normal((batch, new, HIDDEN)).astype(np.float32), "attention_mask": mask,
            "past_key_values.0.key": rng.standard_normal(cache).astype(np.float32),
            "past_key_values.0.value": rng.standard_normal(cache).astype(np.float32)}


def _worst(original: onnx.ModelProto, fused: onnx.ModelProto, feed: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(a - b).max()) for a, b in zip(_run(original, feed), _run(fused, feed), strict=True))


def test_without_the_contracts_the_window_stays_in_the_bias() -> None:
    model = _decoder()
    result = _fuse(model, ())  # no contract: MultiHeadAttention over the additive bias
    assert {k: v for k, v in result.counts.items() if v} == {"mha-4d": 1}, result.near_misses
    assert not result.dropped and result.validation.ok
    assert "--contract unpadded-queries" in result.skipped["gqa-past-window"]
    [(op, attrs, inputs)] = _attention(result.model)
    assert op == "MultiHeadAttention" and not attrs.get("unidirectional") and inputs[5] == "bias"
    # batch1-chunks alone: GroupQueryAttention with the bias, causal 0, no window of its own
    result = _fuse(model, ("batch1-chunks",))
    assert {k: v for k, v in result.counts.items() if v} == {"gqa-past": 1}, result.near_misses
    assert not result.dropped and result.validation.ok and result.contracts == ["batch1-chunks"]
    reason = result.verdicts()["gqa-past-window"]
    assert reason.startswith("skipped: narrows the inputs the model accepts: every new token of a step visible")
    assert "batch1-chunks accepts" not in reason  # it names only the contract missing
    [(op, attrs, inputs)] = _attention(result.model)
    assert op == "GroupQueryAttention" and attrs.get("causal", 0) == 0 and "local_window_size" not in attrs
    assert inputs[10] == "bias"
    for feed in (_step(2, 6, 0), _step(1, 9, 0), _step(2, 1, 11)):
        assert _worst(model, result.model, feed) < 1e-4


def test_under_the_contracts_the_window_is_group_query_attentions_local_window() -> None:
    model = _decoder()
    result = _fuse(model, CONTRACTS)
    assert {k: v for k, v in result.counts.items() if v} == {"gqa-past-window": 1}, result.near_misses
    assert not result.dropped and result.validation.ok
    [(op, attrs, inputs)] = _attention(result.model)
    assert op == "GroupQueryAttention" and attrs["causal"] == 1 and attrs["local_window_size"] == WINDOW
    assert inputs[10] == "bias"  # the padding stays the op's bias
    # validated at a decode step, a prefill (batch 2, every prompt token visible), a chunk (batch 1), a long past
    sizes = {s["name"]: s for s in result.validation.sizes}
    assert list(sizes) == ["decode", "prefill", "chunk", "long past"]
    assert sizes["prefill"]["shapes"]["x"][0] == 2 and sizes["chunk"]["shapes"]["x"][0] == 1
    # both contracts stated in the result and the model
    assert result.contracts == list(CONTRACTS)
    stated = {p.key: p.value for p in result.model.metadata_props}[METADATA_KEY]
    assert stated.startswith("batch1-chunks:") and "unpadded-queries: every new token of a step visible" in stated
    # exact on every input the contracts keep: prompts, decode steps over padded pasts, chunks at batch 1, across
    # the window (pasts 0..12 around W = 4, and 40)
    for past in [*range(13), 40]:
        for batch, new in ((2, 1), (3, 1), (1, 3), (1, 7)):
            assert _worst(model, result.model, _step(batch, new, past, seed=past)) < 1e-4, (batch, new, past)
    for batch, new in ((2, 5), (3, 16), (1, 40)):
        assert _worst(model, result.model, _step(batch, new, 0)) < 1e-4


def test_a_padded_query_is_what_the_contract_gives_up() -> None:
    # measured, not assumed: a left-padded prompt differs at its padded positions only
    model = _decoder()
    fused = _fuse(model, CONTRACTS, validate=False).model
    feed = _step(2, 9, 0)
    feed["attention_mask"][1, :3] = 0
    original, candidate = _run(model, feed)[0], _run(fused, feed)[0]
    visible = feed["attention_mask"].astype(bool)
    assert np.abs(original - candidate)[visible].max() < 1e-4
    assert np.abs(original - candidate)[~visible].max() > 1e-2


@pytest.mark.parametrize("runs", [1, 3])
def test_validation_under_the_contract_draws_no_padded_query(runs: int) -> None:
    # every set's mask is 1 at its new tokens; the pasts keep the padding drawn for them (left, right, holes)
    for contracts, padded_queries in (((), True), (("unpadded-queries",), False)):
        validator = Validator(_decoder(), runs=runs, contracts=contracts)
        queries, pasts = [], []
        for input_set in validator.sets:
            past = input_set.size.bindings["past"]
            for run in range(runs):
                mask = input_set.feed(run)["attention_mask"]
                queries.append(mask[:, past:])
                pasts.append(mask[:, :past])
        assert any(not q.all() for q in queries) == padded_queries, contracts
        assert any(p.size and not p.all() for p in pasts)
    prefill = next(s for s in validator.sets if s.size.name == "prefill")
    assert prefill.described["attention_mask"]["values"] == "1 at every new token (unpadded-queries)"


@pytest.mark.parametrize("window", [EXP_WINDOW, POW_WINDOW], ids=["exp", "pow"])
def test_a_computed_window_past_200_is_never_plain_causal(window: str) -> None:
    model = _decoder(window)
    for contracts in ((), ("batch1-chunks",), CONTRACTS):
        result = _fuse(model, contracts, validate=False)
        for op, attrs, inputs in _attention(result.model):
            # the bias (the window with it) stays an input of the op; a window of its own is 200 keys
            assert not attrs.get("unidirectional") and "bias" in inputs, (contracts, op, attrs)
            assert attrs.get("local_window_size", 200) in (200, 201), (contracts, attrs)
        if contracts == CONTRACTS and not result.counts.get("gqa-past-window"):  # Pow's bound: 6119 tokens
            alone = apply_fusions(model, Fusions(["gqa-past-window"], options=RewriteOptions(
                explain=True, contracts=contracts)), False)
            assert "length threshold" in alone.near_misses["gqa-past-window"].reason
        # past the threshold: a decode step after 230 keys and a 230-token prompt agree with the original
        for feed in (_step(2, 1, 230), _step(1, 230, 0)):
            assert _worst(model, result.model, feed) < 1e-4, contracts
    assert Counter(n.op_type for n in result.model.graph.node)["Softmax"] == 0


def _cli(*args: str) -> dict:
    run = subprocess.run([str(GSREWRITE), *args, "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_explain_gives_optimizes_verdict_with_the_contracts(tmp_path: Path) -> None:
    path = tmp_path / "window.onnx"
    onnx.save(_decoder(), path)
    patterns = [arg for name in PATTERNS for arg in ("-p", name)]
    for contracts in ((), ("batch1-chunks",), CONTRACTS):
        flags = [arg for name in contracts for arg in ("--contract", name)]
        explained = _cli("explain", str(path), *patterns, *flags, "--validate")
        optimized = _cli("optimize", str(path), "-o", str(tmp_path / "out.onnx"), *patterns, *flags)
        verdict = explained["verdicts"]["gqa-past-window"]
        if contracts == CONTRACTS:
            assert optimized["counts"].get("gqa-past-window") == 1 and not optimized["dropped"]
            assert verdict.startswith("applied 1"), verdict
            assert "dropped" not in verdict
        else:
            assert verdict == f"skipped: {optimized['skipped']['gqa-past-window']}"
            assert "--contract unpadded-queries accepts that" in verdict
            assert ("--contract batch1-chunks accepts that" in verdict) == (not contracts)
        assert explained["counts"] == optimized["counts"]


NARROWING = '''family = "t"

[[pattern]]
name = "relu-relu"
narrows = {narrows}
match = "g (x) => (y) {{ [first] r = Relu (x)  y = Relu (r) }}"
replace.ort = "g (x) => (y) {{ y = Relu (x) }}"
'''


@pytest.mark.parametrize(("narrows", "error"), [
    ('{ ort = ["batch1-chunks", "unpadded-queries"] }', None),
    ('{ ort = "unpadded-queries" }', None),
    ('{ ort = ["batch1-chunks", "no-such-contract"] }', "unknown contract 'no-such-contract'"),
    ("{ ort = [] }", "a list of them"),
])
def test_a_pattern_may_narrow_to_several_contracts(tmp_path: Path, narrows: str, error: str | None) -> None:
    (tmp_path / "p.toml").write_text(NARROWING.format(narrows=narrows))
    registry = PatternRegistry()
    if error is not None:
        with pytest.raises(PatternError, match=error):
            registry.add_file(tmp_path / "p.toml")
        return
    [pattern] = registry.add_file(tmp_path / "p.toml")
    model = model_from_text("g (float[2, 3] x) => (float[2, 3] y) { r = Relu (x)  y = Relu (r) }")
    for contracts in ((), ("batch1-chunks",), CONTRACTS):
        options = RewriteOptions(contracts=contracts, registry=registry)
        result = apply_fusions(model, Fusions(["relu-relu"], options=options), False)
        if set(pattern.narrows["ort"]) <= set(contracts):
            assert result.counts == {"relu-relu": 1} and result.contracts == sorted(pattern.narrows["ort"])
        else:
            assert not result.changed and "relu-relu" in result.skipped


def test_the_window_goes_before_gqa_past_at_every_size() -> None:
    # the same match as gqa-past: "+1" puts each variant before gqa-past's of its size, whatever the exporter's
    # spelling (an absolute 19 let gqa-past's larger variants take Mistral's dynamo export first)
    registry = default_registry()
    window, plain = registry.select(["gqa-past-window"])[0], registry.select(["gqa-past"])[0]
    assert [window.variant_priority(v) for v in window.variants] == [plain.variant_priority(v) + 1
                                                                      for v in plain.variants]


@pytest.mark.parametrize("priority", ['"1"', '"+x"', "true"])
def test_a_priority_is_an_integer_or_an_offset(tmp_path: Path, priority: str) -> None:
    text = NARROWING.format(narrows='{ ort = "batch1-chunks" }')
    text = text.replace("narrows = ", f"priority = {priority}\nnarrows = ")
    (tmp_path / "p.toml").write_text(text)
    with pytest.raises(PatternError, match="priority must be"):
        PatternRegistry().add_file(tmp_path / "p.toml")
