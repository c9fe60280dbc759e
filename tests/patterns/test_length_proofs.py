"""Proofs for every length the model can run: thresholds the graph *computes* from its constants.

A window of ``Exp(ln 200 + 0 * S)`` or ``Pow(2, log2 200 + 0 * S)`` (``S`` a length read from a Shape, so nothing
folds it) is 200, though no constant of the graph is larger than 7.7: the product rule over the graph's own
constants alone proved such masks at lengths below 200 and fused them as plain causal/padding masks (19-44% of
the outputs wrong at 260-300 tokens). Computed constants now count like constants (``sizes.length_bound``), a
sublinear function of the length (``Sqrt``, ``Log``) raises the bound, and a threshold past the end of a table
the model slices is no reason to refuse: the model cannot run there.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_attention_mask import CAUSAL, LEGACY, SLICED_BUFFER, _model
from test_mask_variants import BOTH, DYNAMO, _rewrite, _rewrite_unchecked, _variant, _with_grid
from test_rotary import DYNAMIC, _rotary_of

from gsrewrite.pipelines import apply
from gsrewrite.testing import model_from_text

LN_200 = math.log(200.0)
CONSTANTS: dict[str, np.ndarray] = {"f0": np.array(0.0, np.float32), "ln200": np.array(LN_200, np.float32),
             "log2_200": np.array(math.log2(200.0), np.float32), "two_f": np.array(2.0, np.float32),
             "f20": np.array(20.0, np.float32), "f40": np.array(40.0, np.float32),
             "w5000": np.array(5000, np.int64), "ax3": np.array([3], np.int64)}

# the window, computed from the length n so that nothing folds it: Exp(ln 200 + 0 * n) = 200
EXP_WINDOW = """
      nf = Cast <to = 1> (n)
      z = Mul (nf, f0)
      lw = Add (z, ln200)
      win = Exp (lw)
"""
# Pow(2, log2 200 + 0 * n) = 200
POW_WINDOW = EXP_WINDOW.replace("Add (z, ln200)", "Add (z, log2_200)").replace("Exp (lw)", "Pow (two_f, lw)")
# windows that grow with the length, slower than it: 20 sqrt(n) (under n past 400), 40 ln(n) (past ~176)
SQRT_WINDOW = """
      nf = Cast <to = 1> (n)
      rt = Sqrt (nf)
      win = Mul (rt, f20)
"""
LOG_WINDOW = """
      nf = Cast <to = 1> (n)
      lg = Log (nf)
      win = Mul (lg, f40)
"""
# key j hidden for query i when i - j >= win (a sliding window), spliced into GPT-2's keep grid
SLIDING = """
      diff = Sub (rq, rk)
      df = Cast <to = 1> (diff)
      near = Less (df, win)
      both = And (grid, near)
"""
# BERT's padding bias with a band |i - j| < win around each query
BAND = LEGACY.replace("bias = Expand (small, tgt)", """pad = Expand (small, tgt)
      n = Gather <axis = 0> (sm, one_i)
      WINDOW
      r = Range (zero_i, n, one_i)
      rq = Unsqueeze (r, ax1)
      rk = Unsqueeze (r, zero_1)
      diff = Sub (rq, rk)
      dist = Abs (diff)
      df = Cast <to = 1> (dist)
      far = GreaterOrEqual (df, win)
      bias = Where (far, big, pad)""")


def _window_model(base: str, window: str) -> onnx.ModelProto:
    """GPT-2's causal bias (``base``: the legacy or the dynamo spelling) with a computed sliding window."""
    return _variant(_with_grid(base, window + SLIDING), constants=CONSTANTS)


BLIND = {  # name: (model, patterns)
    "gpt2-legacy-exp-window": (lambda: _window_model(CAUSAL, EXP_WINDOW), BOTH),
    "gpt2-dynamo-exp-window": (lambda: _window_model(DYNAMO, EXP_WINDOW), BOTH),
    "gpt2-legacy-pow-window": (lambda: _window_model(CAUSAL, POW_WINDOW), BOTH),
    "bert-band-exp-window": (lambda: _variant(BAND.replace("WINDOW", EXP_WINDOW), constants=CONSTANTS), BOTH),
    "gpt2-sqrt-window": (lambda: _window_model(CAUSAL, SQRT_WINDOW), BOTH),
    "gpt2-log-window": (lambda: _window_model(CAUSAL, LOG_WINDOW), BOTH),
}


@pytest.mark.parametrize("name", list(BLIND))
def test_computed_windows_are_not_fused_as_plain_masks(name: str) -> None:
    build, patterns = BLIND[name]
    result = _rewrite(build(), patterns)
    assert not result.changed, f"{name} was fused: {dict(result.counts)}"
    reasons = [m.reason for p, m in result.near_misses.items() if p in patterns]
    # refused before running (the length it needs is too long) or shown wrong past the threshold
    shown = [int(n) for r in reasons for n in re.findall(r"sequence (\d+)\)", r)]
    assert any("length threshold" in r for r in reasons) or any(n > 176 for n in shown), reasons


def test_a_computed_window_changes_the_outputs_only_past_its_threshold() -> None:
    # what the refusal saves: a plain causal mask in its place agrees at 130 tokens and is wrong at 260
    model = _window_model(CAUSAL, EXP_WINDOW)
    forced = _rewrite_unchecked(model, BOTH)
    diffs = {n: _outputs_differ(model, forced, n) for n in (130, 260)}
    assert diffs[130] < 1e-5 and diffs[260] > 1e-2, diffs


def _outputs_differ(original: onnx.ModelProto, candidate: onnx.ModelProto, length: int) -> float:
    rng = np.random.default_rng(length)
    feeds = {"x": rng.standard_normal((1, length, 8)).astype(np.float32), "mask": np.ones((1, length), np.int64)}
    a, b = (_session(m).run(None, feeds)[0] for m in (original, candidate))
    return float(np.max(np.abs(a - b)))


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def test_explain_gives_the_reason_for_the_refused_window(tmp_path: Path) -> None:
    path = tmp_path / "window.onnx"
    onnx.save(_window_model(CAUSAL, EXP_WINDOW), path)
    gsrewrite = Path(sys.executable).with_name("gsrewrite")
    done = subprocess.run([str(gsrewrite), "explain", "--pattern", "attention-causal-mask-index", str(path),
                           "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    text = json.dumps(json.loads(done.stdout))
    assert re.search(r"the key is not in the future \(batch \d+, sequence \d{3,}\)", text), text


# --- tables: the model cannot run past the end of a table it slices -----------------------------------------

def test_a_threshold_past_the_end_of_the_causal_buffer_is_no_reason_to_refuse() -> None:
    # a window of 5000 over a 64-row causal buffer: the model runs at 64 tokens at most, where it is causal
    window = "\n      diff = Sub (rq, rk)\n      near = Less (diff, w5000)\n      both = And (grid, near)\n"
    sliced = SLICED_BUFFER.replace("grid = Slice (rows, zero_1, n1, ax3)", """grid = Slice (rows, zero_1, n1, ax3)
      n = Squeeze (n1)
      r = Range (zero_i, n, one_i)
      rq = Unsqueeze (r, ax1)
      rk = Unsqueeze (r, zero_1)""" + window).replace("keep = And (grid, p4)", "keep = And (both, p4)")
    buffer = np.tril(np.ones((64, 64), bool))[None, None]
    model = _model(sliced, constants={"tril": buffer, **CONSTANTS})
    assert {k: v for k, v in _rewrite(model, BOTH).counts.items() if v} == {"attention-causal-mask-index": 1}
    # without the buffer the model runs at any length: a window of 5000 needs length 10003, refused
    result = _rewrite(_variant(_with_grid(CAUSAL, window), constants=CONSTANTS), BOTH)
    assert not result.changed
    assert "10003 > 8192" in result.near_misses["attention-causal-mask-index"].reason


# --- rotary tables computed at run time ---------------------------------------------------------------------

DH = 8
ROTARY_CONSTANTS: dict[str, np.ndarray] = {
    "s2": np.array([DH // 2]), "e2": np.array([2**62]), "s1": np.array([0]), "e1": np.array([DH // 2]),
    "axes": np.array([-1]), "two_i": np.array(2), "zero_f": np.array(0.0, np.float32),
    "one_f": np.array(1.0, np.float32), "one_1": np.array([1]), "zero_one": np.array([0, 1]),
    "inv_freq": (1.0 / (10000 ** (np.arange(0, DH, 2) / DH))).astype(np.float32),
    "long_freq": (0.25 / (10000 ** (np.arange(0, DH, 2) / DH))).astype(np.float32),
    "f64": np.array(64.0, np.float32), "minus_1": np.array([-1]), "f500": np.array(500.0, np.float32),
    **CONSTANTS,
}


def _dynamic(second: str, splice: str, before: str = "emb = Concat", instead: bool = False) -> onnx.ModelProto:
    """test_rotary's run-time tables (positions 0..S-1 from q's shape) with ``splice`` before ``before`` (or
    ``instead`` of it)."""
    text = DYNAMIC.replace("SECOND", second).replace("ROTARY_Q", _rotary_of("q")).replace("ROTARY_K", _rotary_of("k"))
    text = text.replace(before, splice + ("" if instead else "\n " + before))
    return model_from_text(text, initializers={k: v for k, v in ROTARY_CONSTANTS.items() if k in text})


def test_run_time_tables_whose_second_half_changes_past_a_computed_position_are_not_fused() -> None:
    # from position Exp(ln 200 + 0 * S) = 200 on, the second half of each row doubles
    late = """z = Mul (nf, zero_f)
        lw = Add (z, ln200)
        thr = Exp (lw)
        late = GreaterOrEqual (p2, thr)
        fx = Mul (freqs, two_f)
        f2 = Where (late, fx, freqs)"""
    result = _rewrite(_dynamic("f2", late), ["rotary"])
    assert not result.changed
    reason = result.near_misses["rotary-dynamic"].reason
    found = re.search(r"for (\d+) positions\) does not have one row per position with equal halves", reason)
    assert found and int(found.group(1)) > 200, reason


def test_run_time_tables_switching_frequencies_past_a_length_are_proven_there() -> None:
    # LongRoPE-style: other frequencies once the sequence is longer than 64; both halves switch together
    switch = "long = Greater (nf, f64)\n fq = Where (long, long_freq, inv_freq)"
    model = _dynamic("freqs", switch, before="freqs = Mul (p2, inv_freq)")
    model.graph.node[[n.output[0] for n in model.graph.node].index("freqs")].input[1] = "fq"
    result = apply(model, ["rotary"], validate=False)
    assert {k: v for k, v in result.counts.items() if v} == {"rotary-dynamic": 2}
    assert _max_diff(model, result.model, {"q": 100, "k": 100}) < 1e-5  # past the switch: the same outputs


# transformers' decoders with a cache: per-token tables from position ids, [batch, 1, sequence, head_size]
POSITIONS = """
    g (float[batch, 2, seq, 8] q, float[batch, 2, seq, 8] k, int64[batch, seq] pids)
      => (float[batch, 2, seq, 8] yq, float[batch, 2, seq, 8] yk) {
        p3 = Unsqueeze (pids, minus_1)
        pf = Cast <to = 1> (p3)
        FREQS
        emb = Concat <axis = -1> (freqs, SECOND)
        ct = Cos (emb)
        st = Sin (emb)
        COS_SIN
        ROTARY_Q
        ROTARY_K
    }"""
TABLES = "cos = Unsqueeze (ct, one_1)\n sin = Unsqueeze (st, one_1)"


def _positions(freqs: str, second: str = "freqs", tables: str = TABLES) -> onnx.ModelProto:
    text = POSITIONS.replace("FREQS", freqs).replace("SECOND", second).replace("COS_SIN", tables).replace(
        "ROTARY_Q", _rotary_of("q")).replace("ROTARY_K", _rotary_of("k"))
    return model_from_text(text, initializers={k: v for k, v in ROTARY_CONSTANTS.items() if k in text})


def test_per_token_tables_switching_frequencies_past_a_position_are_fused_by_construction() -> None:
    # LongRoPE-style: other frequencies for the tokens past position 64; cat(f, f) keeps the halves equal
    freqs = "long = Greater (pf, f64)\n fl = Mul (pf, long_freq)\n fs = Mul (pf, inv_freq)\n" \
            "freqs = Where (long, fl, fs)"
    model = _positions(freqs)
    result = apply(model, ["rotary"], validate=False)
    assert {k: v for k, v in result.counts.items() if v} == {"rotary-positions": 2}
    assert _max_diff(model, result.model, {"q": 100, "k": 100, "pids": 100}) < 1e-5


@pytest.mark.parametrize(("freqs", "second", "tables", "reason"), [
    # the second half alone switches past position 200
    ("freqs = Mul (pf, inv_freq)", "f2", TABLES,
     "one tensor concatenated with itself"),
    # whole tables switch past a position after the concatenation: a Where may mix the halves
    ("freqs = Mul (pf, inv_freq)", "freqs",
     "ct2 = Mul (ct, two_f)\n late = GreaterOrEqual (pf, f64)\n cl = Where (late, ct2, ct)\n"
     "cos = Unsqueeze (cl, one_1)\n sin = Unsqueeze (st, one_1)", "computed by Where"),
])
def test_per_token_tables_that_switch_outside_the_frequencies_are_refused(freqs: str, second: str, tables: str,
                                                                         reason: str) -> None:
    late = "\n late = GreaterOrEqual (pf, f64)\n fx = Mul (freqs, two_f)\n f2 = Where (late, fx, freqs)"
    model = _positions(freqs + (late if second == "f2" else ""), second, tables)
    result = _rewrite(model, ["rotary"])
    assert not result.changed
    assert reason in result.near_misses["rotary-positions"].reason


def _max_diff(original: onnx.ModelProto, candidate: onnx.ModelProto, lengths: dict[str, int]) -> float:
    """Largest |original - candidate| over the outputs, batch 2, at the given sequence lengths."""
    rng = np.random.default_rng(3)
    feeds = {}
    for name, length in lengths.items():
        if name == "pids":
            feeds[name] = np.tile(np.arange(length, dtype=np.int64), (2, 1))
        else:
            feeds[name] = rng.standard_normal((2, 2, length, DH)).astype(np.float32)
    a, b = (_session(m).run(None, feeds) for m in (original, candidate))
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def test_run_time_tables_switched_by_an_if_are_refused() -> None:
    # the table itself chosen by an If on the length: a subgraph the proof does not run
    branch = "() => (float[seq, 8] o) {{ o = {op} (emb) }}"
    switch = f"""long = Greater (nf, f64)
        ct = If (long) <then_branch = g1 {branch.format(op="Cos")}, else_branch = g2 {branch.format(op="Sin")}>"""
    model = _dynamic("freqs", switch, before="ct = Cos (emb)", instead=True)
    result = _rewrite(model, ["rotary"])
    assert not result.changed
    reasons = {p: m.reason for p, m in result.near_misses.items()}
    assert "computed by If" in reasons["rotary-dynamic"], reasons


def _position_table(table_rows: int | None) -> onnx.ModelProto:
    """Run-time tables whose second half doubles from position 500 on; the positions are sliced from a
    registered buffer of ``table_rows`` (None: a Range, which runs at any length)."""
    late = "late = GreaterOrEqual (p2, f500)\n fx = Mul (freqs, two_f)\n f2 = Where (late, fx, freqs)"
    model = _dynamic("f2", late)
    if table_rows is not None:
        sliced = onnx.parser.parse_graph("""g (int64 n) => (float[seq] pos) {
            n1 = Unsqueeze (n, zero_1)
            pos = Slice (buffer, zero_1, n1, zero_1)
        }""")
        rng = next(i for i, node in enumerate(model.graph.node) if node.op_type == "Range")
        model.graph.node[rng].CopyFrom(sliced.node[1])
        model.graph.node.insert(rng, sliced.node[0])
        model.graph.node[rng].input[0] = "n"
        model.graph.node[rng + 1].output[0] = model.graph.node[rng + 2].input[0]
        model.graph.initializer.extend([onnx.numpy_helper.from_array(np.arange(table_rows, dtype=np.float32),
                                                                     "buffer"),
                                        onnx.numpy_helper.from_array(np.array([0]), "zero_1")])
    onnx.checker.check_model(model)
    return model


def test_a_rotary_threshold_past_the_end_of_a_position_buffer_is_no_reason_to_refuse() -> None:
    # positions sliced from a 64-row buffer: the model runs at 64 tokens at most, where the halves are equal
    result = _rewrite(_position_table(64), ["rotary"])
    assert {k: v for k, v in result.counts.items() if v} == {"rotary-dynamic": 2}
    # positions from a Range run at any length: proven past 500, where the halves differ
    result = _rewrite(_position_table(None), ["rotary"])
    assert not result.changed
    reason = result.near_misses["rotary-dynamic"].reason
    found = re.search(r"for (\d+) positions\) does not have one row per position with equal halves", reason)
    assert found and int(found.group(1)) > 500, reason


# --- the bound itself ---------------------------------------------------------------------------------------

def _bound(nodes: str, constants: dict[str, np.ndarray] | None = None) -> float:
    """sizes.length_bound of ``nodes`` computing ``y`` from the shape of x [batch, seq, 64] (n: its length)."""
    import onnx_graphsurgeon as gs
    from gsrewrite_patterns._shared.producers import computation, stand_in
    from gsrewrite_patterns._shared.sizes import Side, length_bound, probe_values

    text = f"""g (float[batch, seq, 64] x) => (bool[seq, seq] y) {{
        sh = Shape (x)
        n = Gather <axis = 0> (sh, one_i)
        r = Range (zero_i, n, one_i)
        rq = Unsqueeze (r, ax1)
        rk = Unsqueeze (r, zero_1)
        diff = Sub (rq, rk)
        {nodes}
    }}"""
    values = {"one_i": np.array(1), "zero_i": np.array(0), "ax1": np.array([1]), "zero_1": np.array([0]),
              "two_i": np.array(2), **CONSTANTS, **(constants or {})}
    graph = gs.import_onnx(model_from_text(text, initializers={k: v for k, v in values.items()
                                                               if re.search(rf"\b{k}\b", text)}))
    y = graph.tensors()["y"]
    found = computation(graph, y)
    side = Side(found.nodes, found.shape_inputs, y, 17, "y")

    def feeds(batch: int, length: int) -> dict[str, np.ndarray]:
        return {t.name: stand_in(t, {"batch": batch, "seq": length}, (batch, length)) for t in found.shape_inputs}

    return length_bound(found.nodes, y, probe_values(side, None, feeds))


def test_a_computed_constant_counts_once_where_it_meets_the_length() -> None:
    # the static dim 64, read from the shape and moved through a chain of casts and unsqueezes
    chain = """d = Gather <axis = 0> (sh, two_i)
        d1 = Unsqueeze (d, zero_1)
        d2 = Cast <to = 1> (d1)
        d3 = Cast <to = 7> (d2)
        y = Less (diff, d3)"""
    assert _bound(chain) == 128.0  # 64 where it meets the length, 2 the Gather index


@pytest.mark.parametrize(("nodes", "low", "high"), [
    # Exp(ln 200 + 0 * n): 200 where it meets the length, times ln 200 (a structural constant itself)
    (EXP_WINDOW + "df = Cast <to = 1> (diff)\n y = Less (df, win)", 200 * LN_200, 200 * LN_200 + 1),
    # 1.001 ** n crosses 2 at n = 694: the base counts as 1 / ln 1.001 (times 2, the threshold)
    ("nf = Cast <to = 1> (n)\n g = Pow (base, nf)\n y1 = Greater (g, two_f)\n y = Expand (y1, sq)", 2000, 2001),
    # n >> 9 is 0 below 512
    ("u = Cast <to = 13> (n)\n s = BitShift <direction = \"RIGHT\"> (u, nine)\n z = Cast <to = 7> (s)\n"
     "y1 = Greater (z, zero_i)\n y = Expand (y1, sq)", 512, 513),
    # a ConstantOfShape of 300 compared with the distances
    ("sq2 = Concat <axis = 0> (n1, n1)\n c = ConstantOfShape <value = int64[1] {300}> (sq2)\n y = Less (diff, c)",
     300, 301),
    # sigmoid(n / 100) > 0.99 past n = 460: saturating functions count 37 times their input's bound
    ("nf = Cast <to = 1> (n)\n s = Mul (nf, f001)\n g = Sigmoid (s)\n y1 = Greater (g, f099)\n"
     "y = Expand (y1, sq)", 460, 4000),
])
def test_thresholds_computed_from_constants_are_bounded(nodes: str, low: float, high: float) -> None:
    extra: dict[str, np.ndarray] = {"base": np.array(1.001, np.float32), "nine": np.array(9, np.uint64),
                                    "f001": np.array(0.01, np.float32), "f099": np.array(0.99, np.float32)}
    shaped = "n1 = Unsqueeze (n, zero_1)\n sq = Concat <axis = 0> (n1, n1)\n" if "sq" in nodes else ""
    assert low <= _bound(shaped + nodes, extra) < high


def test_a_periodic_function_of_the_length_is_refused() -> None:
    from gsrewrite_patterns._shared.producers import NotProven

    with pytest.raises(NotProven, match="Cos of a size"):
        _bound("nf = Cast <to = 1> (n)\n c = Cos (nf)\n y1 = Greater (c, f0)\n n1 = Unsqueeze (n, zero_1)\n"
               "sq = Concat <axis = 0> (n1, n1)\n y = Expand (y1, sq)")


def test_lengths_stop_at_the_longest_the_model_can_run() -> None:
    from gsrewrite_patterns._shared.producers import NotProven
    from gsrewrite_patterns._shared.sizes import proof_lengths, runnable_limit

    assert [n for n, _ in proof_lengths(5000.0, 1, "x", [64], limit=64)] == [7, 33, 64]
    with pytest.raises(NotProven, match="10003 > 8192"):
        proof_lengths(5000.0, 1, "x", [64])
    assert runnable_limit([64, 300], 10003, lambda n: n <= 64) == 64
    assert runnable_limit([64, 300], 10003, lambda n: n <= 300) == 300
    assert runnable_limit([64], 10003, lambda n: True) is None
    assert runnable_limit([64], 40, lambda n: False) is None  # the lengths needed stop before the table ends
