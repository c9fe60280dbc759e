"""Constant rotary tables under a bounded length (gsrewrite.pipelines.rotary_tables): the model's own per-step
rotary subgraph evaluated once over every position, taken only where each token's rows depend on its position
alone; and through ``optimize --target genai``, a folder whose model has no per-step rotary nodes left."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.pipelines.decoder_signature import CacheLayer, DecoderSignature
from gsrewrite.pipelines.rotary_tables import constant_rotary_tables, prune, tables_of

FIXTURES = Path(__file__).parent / "fixtures" / "models"
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
HEADS, SIZE = 2, 8
INV_FREQ = (1.0 / 10000 ** (np.arange(0, SIZE, 2) / SIZE)).astype(np.float32)

SIGNATURE = DecoderSignature("input_ids", "attention_mask", "position_ids",
                             (CacheLayer("past.0.key", "past.0.value", "present.0.key", "present.0.value"),),
                             {}, "logits", 10, HEADS, SIZE, None)


def rotary_model(angle: str = "local", weight: bool = False) -> onnx.ModelProto:
    """x [B, S, heads * size] rotated by RotaryEmbedding over per-token tables computed from the position ids, as
    exporters write it (Cast, Unsqueeze, Mul by the inverse frequencies, Cos/Sin, the ids each token's own row).
    ``angle``: ``local`` (position * inv_freq), ``length`` (scaled by the sequence length: dynamic NTK-like),
    ``longest`` (scaled when the largest position passes 100: LongRoPE-like)."""
    nodes = [
        helper.make_node("Cast", ["position_ids"], ["pf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["pf", "axis_last"], ["pu"]),
        helper.make_node("Mul", ["pu", "inv_freq"], ["angle0"]),
    ]
    if angle == "length":
        nodes += [helper.make_node("Shape", ["input_ids"], ["ids_shape"], start=1, end=2),
                  helper.make_node("Cast", ["ids_shape"], ["len_f"], to=TensorProto.FLOAT),
                  helper.make_node("Div", ["len_f", "thousand"], ["len_k"]),
                  helper.make_node("Add", ["len_k", "one_f"], ["factor"]),
                  helper.make_node("Mul", ["angle0", "factor"], ["angle"])]
    elif angle == "longest":
        nodes += [helper.make_node("ReduceMax", ["pf"], ["top"], keepdims=0),
                  helper.make_node("Greater", ["top", "hundred"], ["long"]),
                  helper.make_node("Where", ["long", "half", "one_f"], ["factor"]),
                  helper.make_node("Mul", ["angle0", "factor"], ["angle"])]
    else:
        nodes.append(helper.make_node("Identity", ["angle0"], ["angle"]))
    if weight:  # the angle read through a large weight: not the table's to evaluate
        nodes.append(helper.make_node("Gather", ["big", "zero_i"], ["row"], axis=0))
        nodes.append(helper.make_node("Add", ["angle", "row"], ["angle_w"]))
        last = "angle_w"
    else:
        last = "angle"
    nodes += [
        helper.make_node("Cos", [last], ["cos3"]), helper.make_node("Sin", [last], ["sin3"]),
        helper.make_node("Reshape", ["cos3", "flat"], ["cos"]), helper.make_node("Reshape", ["sin3", "flat"], ["sin"]),
        helper.make_node("Shape", ["position_ids"], ["pshape"]),
        helper.make_node("ReduceProd", ["pshape"], ["count"], keepdims=1),
        helper.make_node("Squeeze", ["count"], ["count0"]),
        helper.make_node("Range", ["zero", "count0", "one"], ["index"]),
        helper.make_node("Reshape", ["index", "pshape"], ["ids"]),
        helper.make_node("RotaryEmbedding", ["x", "ids", "cos", "sin"], ["y"], domain="com.microsoft",
                         num_heads=HEADS),
    ]
    inits = [numpy_helper.from_array(INV_FREQ, "inv_freq"),
             numpy_helper.from_array(np.array([-1], np.int64), "axis_last"),
             numpy_helper.from_array(np.array([-1, SIZE // 2], np.int64), "flat"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([1000.0], np.float32), "thousand"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one_f"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"),
             numpy_helper.from_array(np.array(100.0, np.float32), "hundred"),
             numpy_helper.from_array(np.zeros((5000, SIZE // 2), np.float32), "big"),
             numpy_helper.from_array(np.array(0, np.int64), "zero_i")]
    graph = helper.make_graph(nodes, "rotary", [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", HEADS * SIZE]),
    ], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def run(model: onnx.ModelProto, positions: np.ndarray, seed: int = 0) -> np.ndarray:
    batch, length = positions.shape
    x = np.random.default_rng(seed).standard_normal((batch, length, HEADS * SIZE)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.zeros((batch, length), np.int64), "position_ids": positions,
             "attention_mask": np.ones((batch, int(positions.max()) + 1), np.int64), "x": x}
    wanted = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feeds.items() if k in wanted})[0]


def test_a_position_local_table_becomes_constant_and_keeps_every_output() -> None:
    model = rotary_model()
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    assert constant_rotary_tables(changed, SIGNATURE, 600, rotating_attention=False) == 1
    ops = Counter(n.op_type for n in changed.graph.node)
    assert ops == {"RotaryEmbedding": 1}, ops  # every per-step node gone
    rotary = changed.graph.node[0]
    assert rotary.input[1] == "position_ids" and dict(tables_of(changed)) == {
        "rotary-tables/cos_0": 600, "rotary-tables/sin_0": 600}
    table = numpy_helper.to_array(next(t for t in changed.graph.initializer if t.name == "rotary-tables/cos_0"))
    np.testing.assert_allclose(table, np.cos(np.arange(600, dtype=np.float32)[:, None] * INV_FREQ), atol=1e-5)
    # decode steps at any position, a chunk, a batch of different positions (non-consecutive too)
    for positions in (np.array([[0]]), np.array([[599]]), np.arange(40, 47)[None], np.array([[3, 9, 4], [500, 2, 77]])):
        np.testing.assert_allclose(run(changed, positions), run(model, positions), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("angle", "weight", "says"), [
    ("length", False, "depends on more than each token's position"),
    ("longest", False, "depends on more than each token's position"),
    ("local", True, "reads the weight 'big'"),
])
def test_a_table_that_is_not_a_function_of_the_position_alone_stays(angle: str, weight: bool, says: str) -> None:
    model = rotary_model(angle, weight)
    before = model.SerializeToString()
    reason = constant_rotary_tables(model, SIGNATURE, 600, rotating_attention=False)
    assert isinstance(reason, str) and says in reason, reason
    assert model.SerializeToString() == before  # untouched


def test_group_query_attention_needs_the_prompt_contract_and_position_ids() -> None:
    """GroupQueryAttention's own rotary reads the table only when unpadded-prompts is accepted; without position
    ids there is nothing to index a constant table with."""
    model = rotary_model()
    rotary = model.graph.node[-1]
    gqa = helper.make_node("GroupQueryAttention", ["x", "", "", "pk", "pv", "sl", "tot", "cos", "sin", "ids"],
                           ["y", "present.0.key", "present.0.value"], domain="com.microsoft", num_heads=HEADS,
                           kv_num_heads=HEADS, do_rotary=1)
    model.graph.node.remove(rotary)
    model.graph.node.append(gqa)
    reason = constant_rotary_tables(model, SIGNATURE, 600, rotating_attention=False)
    assert isinstance(reason, str) and "unpadded-prompts" in reason
    import dataclasses
    no_positions = dataclasses.replace(SIGNATURE, position_ids=None)
    assert "no position ids" in str(constant_rotary_tables(model, no_positions, 600, rotating_attention=True))


def test_prune_removes_what_nothing_reads_and_keeps_graph_inputs() -> None:
    graph = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["dead"]), helper.make_node("Abs", ["w"], ["dead2"]),
         helper.make_node("Relu", ["a"], ["out"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "w"), numpy_helper.from_array(np.ones(2, np.float32), "d"),
         numpy_helper.from_array(np.ones(2, np.float32), "unused")])
    assert prune(graph) == 2
    assert [n.op_type for n in graph.node] == ["Relu"]
    # w was read by a removed node only; d is a graph input's default; unused was read by nothing before either
    assert sorted(t.name for t in graph.initializer) == ["d", "unused"]


def test_the_genai_folder_reads_constant_tables_and_states_no_longer_length(tmp_path: Path) -> None:
    """The installed CLI: --target genai --max-length 700 stores the tiny decoder's rotary as tables of 700 rows
    (no Cos, Sin or Range per step), validated, and genai_config's max_length stays within them."""
    folder = tmp_path / "genai"
    done = subprocess.run([str(GSREWRITE), "optimize", str(FIXTURES / "llama.dynamo_kv.onnx"), str(folder),
                           "--target", "genai", "--max-length", "700", "--json"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["validation"]["ok"] and "shared-kv-buffer" in report["contracts"]
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    ops = Counter(n.op_type for n in model.graph.node)
    assert not {"Cos", "Sin"} & set(ops) and ops["RotaryEmbedding"] > 0, ops
    rows = set(tables_of(model).values())
    assert rows == {700}
    config = json.loads((folder / "genai_config.json").read_text())
    assert config["search"]["max_length"] == 700
