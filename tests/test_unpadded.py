"""The ``unpadded`` contract (gsrewrite.pipelines.unpadded): GroupQueryAttention drops the mask's bias only where
the bias, evaluated with a mask of ones, is exactly the causal (and window) mask it applies itself; the contract
implies the narrower ones and validation then feeds masks of ones only."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.contracts import check_contracts, stated
from gsrewrite.pipelines.decoder_signature import CacheLayer, DecoderSignature
from gsrewrite.pipelines.unpadded import drop_padding_bias
from gsrewrite.validation.prefill import PrefillPlan, queries_visible

HEADS, KV_HEADS, SIZE = 2, 1, 8
SIGNATURE = DecoderSignature("input_ids", "attention_mask", None,
                             (CacheLayer("past.0.key", "past.0.value", "present.0.key", "present.0.value"),),
                             {}, "out", 10, KV_HEADS, SIZE, None)


def attention_model(kind: str = "causal", window: int = -1) -> onnx.ModelProto:
    """GroupQueryAttention over a cache reading an exporter-style bias made from the mask: 0 where key j is
    visible to query i (j <= past + i and mask[j] == 1), the float lowest elsewhere. ``kind``: ``causal``;
    ``window4`` (keys more than 3 before the query masked too, a window the node does not know); ``alibi``
    (a slope times the distance added at visible keys). ``window``: the node's local_window_size."""
    nodes = [
        helper.make_node("Shape", ["attention_mask"], ["mshape"]),
        helper.make_node("Gather", ["mshape", "one"], ["total"], axis=0),
        helper.make_node("Shape", ["input_ids"], ["ishape"]),
        helper.make_node("Gather", ["ishape", "one"], ["new"], axis=0),
        helper.make_node("Sub", ["total", "new"], ["past"]),
        helper.make_node("Range", ["past", "total", "one"], ["qpos"]),
        helper.make_node("Unsqueeze", ["qpos", "last"], ["q2"]),
        helper.make_node("Range", ["zero", "total", "one"], ["kpos"]),
        helper.make_node("LessOrEqual", ["kpos", "q2"], ["causal"]),
        helper.make_node("Cast", ["attention_mask"], ["maskb"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["maskb", "axes12"], ["mask4"]),
        helper.make_node("And", ["causal", "mask4"], ["visible"]),
    ]
    if kind == "window4":
        nodes += [helper.make_node("Sub", ["q2", "three"], ["lo"]),
                  helper.make_node("GreaterOrEqual", ["kpos", "lo"], ["inwin"]),
                  helper.make_node("And", ["visible", "inwin"], ["seen"])]
    else:
        nodes.append(helper.make_node("Identity", ["visible"], ["seen"]))
    nodes.append(helper.make_node("Where", ["seen", "zero_f", "lowest"], ["bias0"]))
    if kind == "alibi":
        nodes += [helper.make_node("Sub", ["kpos", "q2"], ["dist"]),
                  helper.make_node("Cast", ["dist"], ["distf"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["distf", "slope"], ["alibi"]),
                  helper.make_node("Add", ["bias0", "alibi"], ["bias"])]
    else:
        nodes.append(helper.make_node("Identity", ["bias0"], ["bias"]))
    attrs = {"num_heads": HEADS, "kv_num_heads": KV_HEADS, "scale": 0.35, "causal": 0}
    if window >= 0:
        attrs.update(causal=1, local_window_size=window)
    nodes += [
        helper.make_node("ReduceSum", ["attention_mask", "axis1"], ["summed"], keepdims=0),
        helper.make_node("Sub", ["summed", "one"], ["sl64"]),
        helper.make_node("Cast", ["sl64"], ["seqlens"], to=TensorProto.INT32),
        helper.make_node("Cast", ["total"], ["total32"], to=TensorProto.INT32),
        helper.make_node("GroupQueryAttention", ["q", "k", "v", "past.0.key", "past.0.value", "seqlens", "total32",
                                                 "", "", "", "bias"], ["out", "present.0.key", "present.0.value"],
                         domain="com.microsoft", **attrs),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("one", 1), ("zero", 0), ("last", [-1]), ("axes12", [1, 2]), ("three", 3), ("axis1", [1]))]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("zero_f", 0.0), ("lowest", np.finfo(np.float32).min), ("slope", 0.5))]
    read = {name for node in nodes for name in node.input}
    inits = [t for t in inits if t.name in read]
    graph = helper.make_graph(nodes, "attention", [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "new"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", "new", HEADS * SIZE]),
        helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", "new", KV_HEADS * SIZE]),
        helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", "new", KV_HEADS * SIZE]),
        helper.make_tensor_value_info("past.0.key", TensorProto.FLOAT, ["batch", KV_HEADS, "past", SIZE]),
        helper.make_tensor_value_info("past.0.value", TensorProto.FLOAT, ["batch", KV_HEADS, "past", SIZE]),
    ], [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "present.0.key",
                                                                           "present.0.value")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def run(model: onnx.ModelProto, past: int, new: int, batch: int = 1, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": np.zeros((batch, new), np.int64), "attention_mask": np.ones((batch, past + new), np.int64),
             "q": rng.standard_normal((batch, new, HEADS * SIZE)).astype(np.float32),
             "k": rng.standard_normal((batch, new, KV_HEADS * SIZE)).astype(np.float32),
             "v": rng.standard_normal((batch, new, KV_HEADS * SIZE)).astype(np.float32),
             "past.0.key": rng.standard_normal((batch, KV_HEADS, past, SIZE)).astype(np.float32),
             "past.0.value": rng.standard_normal((batch, KV_HEADS, past, SIZE)).astype(np.float32)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in wanted})


def changed(model: onnx.ModelProto, rows: int = 64) -> tuple[onnx.ModelProto, int | str]:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out, drop_padding_bias(out, SIGNATURE, rows)


@pytest.mark.parametrize(("kind", "window"), [("causal", -1), ("window4", 4)])
def test_the_bias_goes_where_it_is_the_nodes_own_mask_and_unpadded_outputs_stay(kind: str, window: int) -> None:
    """A causal bias (and a window bias of the query and the 3 keys before it under local_window_size 4, the keys
    onnxruntime's window lets a query see) goes; the node turns causal, reads its lengths off the mask, and every
    unpadded input gives the same outputs: prompts, a chunk, decode steps, batch 2, a past beyond the window."""
    model = attention_model(kind, window)
    out, done = changed(model)
    assert done == 1, done
    ops = Counter(n.op_type for n in out.graph.node)
    assert not {"Range", "Where", "LessOrEqual", "And"} & set(ops), ops  # the bias' nodes are gone
    node = next(n for n in out.graph.node if n.op_type == "GroupQueryAttention")
    assert len(node.input) == 7 and node.input[5:7] == ["unpadded/seqlens", "unpadded/total"]
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["causal"] == 1
    for past, new, batch in ((0, 1, 1), (0, 6, 1), (5, 3, 1), (9, 1, 1), (0, 5, 2), (7, 1, 2), (40, 1, 1)):
        for got, want in zip(run(out, past, new, batch), run(model, past, new, batch), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"past {past}, new {new}")


@pytest.mark.parametrize(("kind", "window", "says"), [
    ("window4", -1, "is not 0 at every key the query sees"),  # a window the node does not apply
    ("alibi", -1, "is not 0 at every key the query sees"),
    ("causal", 2, "is above -10000 at a key the query must not see"),  # the node's window: narrower than the bias'
    ("window4", 5, "is not 0 at every key the query sees"),  # the node's window is one key wider
])
def test_a_bias_with_any_other_term_stays(kind: str, window: int, says: str) -> None:
    model = attention_model(kind, window)
    before = model.SerializeToString()
    out, reason = changed(model)
    assert isinstance(reason, str) and says in reason, reason
    assert model.SerializeToString() == before and out.SerializeToString() == before


def test_a_window_longer_than_short_tests_is_found_at_the_longest_position() -> None:
    """A bias masking keys more than 300 positions back agrees with causal at every short layout; the decode step
    at the last of 512 rows finds it."""
    model = attention_model("window4")
    three = next(t for t in model.graph.initializer if t.name == "three")
    three.CopyFrom(numpy_helper.from_array(np.array(300, np.int64), "three"))
    reason = changed(model, rows=512)[1]
    assert isinstance(reason, str) and "past 511" in reason, reason
    assert changed(model, rows=64)[1] == 1  # within 64 positions it is the causal mask


def test_a_bias_reading_another_input_or_no_bias_is_left() -> None:
    model = attention_model()
    model.graph.input.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, [1]))
    model.graph.node.append(helper.make_node("Add", ["bias0", "extra"], ["bias_x"]))
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    gqa.input[10] = "bias_x"
    assert "reads the input 'extra'" in str(changed(model)[1])
    plain = attention_model()
    gqa = next(n for n in plain.graph.node if n.op_type == "GroupQueryAttention")
    del gqa.input[10:]
    assert "no GroupQueryAttention reads an attention bias" in str(changed(plain)[1])


def test_unpadded_implies_the_narrower_contracts_and_is_read_back() -> None:
    assert check_contracts(["unpadded"]) == ("unpadded", "unpadded-prompts", "unpadded-queries")
    assert check_contracts(["unpadded-queries", "unpadded"]) == ("unpadded-queries", "unpadded", "unpadded-prompts")
    from gsrewrite.contracts import state
    from gsrewrite.pipelines.options import RewriteOptions

    model = attention_model()
    state(model, ["unpadded"])
    assert stated(model) == ("unpadded", "unpadded-prompts", "unpadded-queries")
    assert RewriteOptions(contracts=("unpadded",)).contracts == check_contracts(["unpadded"])


def test_validation_under_unpadded_feeds_masks_of_ones_only() -> None:
    plan = PrefillPlan({}, ["past"], ["new"], "attention_mask", ["position_ids"])
    mask = np.array([[0, 0, 1, 1, 0, 1], [1, 0, 1, 1, 1, 0]], np.int64)
    feed = {"attention_mask": mask, "position_ids": np.zeros((2, 2), np.int64)}
    everywhere = queries_visible(plan, feed, 4, "all")
    assert (everywhere["attention_mask"] == 1).all()
    assert everywhere["position_ids"].tolist() == [[4, 5], [4, 5]]
    queries = queries_visible(plan, feed, 4, "new")  # unpadded-queries: the past keeps its padding
    assert queries["attention_mask"][:, :4].tolist() == mask[:, :4].tolist()
    assert (queries["attention_mask"][:, 4:] == 1).all()
    assert (queries_visible(plan, feed, 4, None)["attention_mask"] == mask).all()


def test_the_installed_cli_states_unpadded_and_validate_reads_it_back(tmp_path) -> None:
    """``optimize --contract batch1-chunks --contract unpadded`` on the tiny exported LLaMA (its own cache, no
    shared buffer): the bias goes, the contract is stated, and ``validate`` of the result against the original
    passes by reading it back (masks of ones only). The contract is real: at a left-padded prompt the padded row's
    real tokens get other logits than the original's, the unpadded row the same."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / "models" / "llama.dynamo_kv.onnx"
    script = Path(sys.executable).parent / "gsrewrite"
    out = tmp_path / "out.onnx"
    done = subprocess.run([str(script), "optimize", str(fixture), str(out), "--contract", "batch1-chunks",
                           "--contract", "unpadded", "--json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["validation"]["ok"] and "unpadded" in report["contracts"], report["contracts"]
    model = onnx.load(str(out), load_external_data=False)
    attention = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert attention and all(len(n.input) <= 10 or not n.input[10] for n in attention)
    assert "unpadded" in stated(model)
    checked = subprocess.run([str(script), "validate", str(fixture), str(out), "--json"], capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    # the contract is real: a left-padded batch gives other logits at the real tokens' rows than the original's
    original = ort.InferenceSession(str(fixture), providers=["CPUExecutionProvider"])
    rewritten = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.array([[5, 5, 7, 9], [3, 4, 5, 6]], np.int64),
             "attention_mask": np.array([[0, 0, 1, 1], [1, 1, 1, 1]], np.int64),
             "position_ids": np.array([[1, 1, 0, 1], [0, 1, 2, 3]], np.int64)}
    for spec in original.get_inputs():
        if spec.name.startswith("past_key_values"):
            feeds[spec.name] = np.zeros((2, spec.shape[1], 0, spec.shape[3]), np.float32)
    logits = original.get_outputs()[0].name
    a = original.run([logits], feeds)[0]
    b = rewritten.run([logits], feeds)[0]
    assert not np.allclose(a[0, 2:], b[0, 2:], atol=1e-4)  # the padded row's real tokens differ
    np.testing.assert_allclose(a[1], b[1], atol=1e-4)  # the unpadded row stays
