"""embed-layernorm: word + position (+ segment) lookups, summed, LayerNorm -> EmbedLayerNormalization."""

from __future__ import annotations

import numpy as np
import onnx

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

V, P, T, H = 30, 40, 2, 8
FAMILY = ["embed-layernorm"]

# HF BERT (legacy exporter): positions are a Slice of the registered position_ids buffer up to the length
POSITIONS_SLICED = """
      sh = Shape (ids)
      n = Gather <axis = 0> (sh, one_i)
      n1 = Unsqueeze (n, zero_1)
      pids = Slice (buffer, zero_1, n1, one_1, one_1)
"""
# torch.arange(seq).unsqueeze(0) spelled as Range
POSITIONS_RANGE = """
      sh = Shape (ids)
      n = Gather <axis = 0> (sh, one_i)
      r = Range (zero_i, n, one_i)
      pids = Unsqueeze (r, zero_1)
"""
SEGMENT = "s = Gather <axis = 0> (segw, seg)"
SUM_BERT = "a = Add (w, s)\n      e = Add (a, p)"


def _model(positions: str, *, segment: bool = True, summed: str = SUM_BERT, inputs: str = "",
           ids_type: str = "int64") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    seg_input = ", int64[batch, seq] seg" if segment else ""
    text = f"""
    agraph ({ids_type}[batch, seq] ids{seg_input}{inputs}) => (float[batch, seq, {H}] y) {{
      {positions}
      w = Gather <axis = 0> (word, ids)
      {SEGMENT if segment else ""}
      p = Gather <axis = 0> (pos, pids)
      {summed}
      y = LayerNormalization <epsilon = 1e-12> (e, gamma, beta)
    }}
    """
    return model_from_text(text, initializers={
        "word": rng.standard_normal((V, H)).astype(np.float32), "pos": rng.standard_normal((P, H)).astype(np.float32),
        "segw": rng.standard_normal((T, H)).astype(np.float32),
        "gamma": rng.uniform(0.5, 1.5, H).astype(np.float32), "beta": rng.standard_normal(H).astype(np.float32),
        "buffer": np.arange(P, dtype=np.int64)[None, :], "two_i": np.array(2, np.int64),
        "zero_i": np.array(0, np.int64), "one_i": np.array(1, np.int64),
        "zero_1": np.array([0], np.int64), "one_1": np.array([1], np.int64),
    })


def _embed_node(model: onnx.ModelProto) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == "EmbedLayerNormalization")


def test_bert_legacy_positions_are_proven_and_dropped() -> None:
    result = assert_rewrite(_model(POSITIONS_SLICED), FAMILY, {"embed-layernorm": 1},
                            produces={"com.microsoft.EmbedLayerNormalization": 1, "Cast": 2},
                            absent=["Slice", "Shape", "Add", "LayerNormalization", "Gather"])
    node = _embed_node(result.model)
    assert len(node.input) == 7 and len(node.output) == 2  # no mask, no position ids
    assert abs(next(a.f for a in node.attribute if a.name == "epsilon") - 1e-12) < 1e-15


def test_range_positions_and_another_sum_order() -> None:
    summed = "a = Add (p, w)\n      e = Add (s, a)"  # (position + word) + segment
    assert_rewrite(_model(POSITIONS_RANGE, summed=summed), FAMILY, {"embed-layernorm": 1},
                   produces={"com.microsoft.EmbedLayerNormalization": 1}, absent=["Range", "Add"])


def test_position_ids_input_is_passed_through() -> None:
    # position ids given by the caller: nothing to prove, the fallback hands them to the op
    model = _model("", inputs=", int64[batch, seq] pids")
    result = assert_rewrite(model, FAMILY, {"embed-layernorm-position-ids": 1},
                            produces={"com.microsoft.EmbedLayerNormalization": 1, "Cast": 3},
                            inputs={"ids": np.array([[1, 5, 7]]), "seg": np.array([[0, 1, 1]]),
                                    "pids": np.array([[3, 0, 9]])})
    assert _embed_node(result.model).input[8]


def test_offset_positions_are_not_dropped() -> None:
    # RoBERTa-style offset (positions start at 2): not 0..S-1, so the position ids are kept
    offset = POSITIONS_RANGE.replace("r = Range (zero_i, n, one_i)",
                                     "n2 = Add (n, two_i)\n      r = Range (two_i, n2, one_i)")
    result = assert_rewrite(_model(offset), FAMILY, {"embed-layernorm-position-ids": 1},
                            produces={"com.microsoft.EmbedLayerNormalization": 1})
    assert _embed_node(result.model).input[8]
    assert "embed-layernorm" not in {k for k, v in result.counts.items() if v}


def test_distilbert_without_segments() -> None:
    result = assert_rewrite(_model(POSITIONS_SLICED, segment=False, summed="e = Add (w, p)"), FAMILY,
                            {"embed-layernorm-no-segment": 1},
                            produces={"com.microsoft.EmbedLayerNormalization": 1, "Cast": 1})
    node = _embed_node(result.model)
    assert node.input[1] == "" and node.input[4] == ""


def test_sum_used_elsewhere_or_float_ids_do_not_match() -> None:
    # the embedding sum is also a graph output: it would be lost
    model = _model(POSITIONS_SLICED)
    model.graph.output.append(onnx.helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, None))
    assert_no_rewrite(model, FAMILY)
    # a 1-D ids vector: EmbedLayerNormalization needs [batch, sequence]
    one_d = _model(POSITIONS_SLICED.replace("n = Gather <axis = 0> (sh, one_i)", "n = Gather <axis = 0> (sh, zero_i)"),
                   segment=False, summed="e = Add (w, p)").graph
    text_model = onnx.helper.make_model(one_d, opset_imports=[onnx.helper.make_opsetid("", 17)])
    text_model.graph.input[0].type.tensor_type.shape.ClearField("dim")
    text_model.graph.input[0].type.tensor_type.shape.dim.add().dim_param = "seq"
    text_model.graph.output[0].type.tensor_type.shape.ClearField("dim")
    result = assert_no_rewrite(text_model, FAMILY)
    assert any("rank" in miss.reason for miss in result.near_misses.values())


def test_folded_position_constant_of_a_fixed_length_export() -> None:
    # exports with fixed shapes fold Gather(position table, 0..S-1) into a [1, S, H] constant
    rng = np.random.default_rng(1)
    table = rng.standard_normal((P, H)).astype(np.float32)
    text = f"""
    agraph (int64[2, 6] ids, int64[2, 6] seg) => (float[2, 6, {H}] y) {{
      w = Gather <axis = 0> (word, ids)
      s = Gather <axis = 0> (segw, seg)
      a = Add (w, pe)
      e = Add (a, s)
      y = LayerNormalization <epsilon = 1e-12> (e, gamma, beta)
    }}
    """
    weights = {"word": rng.standard_normal((V, H)).astype(np.float32), "pe": table[None, :6],
               "segw": rng.standard_normal((T, H)).astype(np.float32),
               "gamma": rng.uniform(0.5, 1.5, H).astype(np.float32), "beta": rng.standard_normal(H).astype(np.float32)}
    result = assert_rewrite(model_from_text(text, initializers=weights), FAMILY,
                            {"embed-layernorm-folded-positions": 1},
                            produces={"com.microsoft.EmbedLayerNormalization": 1}, absent=["Add", "Gather"])
    node = _embed_node(result.model)
    position_table = next(t for t in result.model.graph.initializer if t.name == node.input[3])
    assert list(position_table.dims) == [6, H]
    # the same constant with a symbolic sequence length: the rows could not be reused for other lengths
    dynamic = model_from_text(text.replace("[2, 6", "[2, seq"), initializers=weights)
    assert_no_rewrite(dynamic, FAMILY)


def test_position_ids_input_without_segments_is_passed_through() -> None:
    # DistilBERT-style (no segment table) with caller-given position ids: no segment input, the ids handed over
    model = _model("", segment=False, summed="e = Add (w, p)", inputs=", int64[batch, seq] pids")
    result = assert_rewrite(model, FAMILY, {"embed-layernorm-no-segment-position-ids": 1},
                            produces={"com.microsoft.EmbedLayerNormalization": 1, "Cast": 2},
                            absent=["Gather", "Add", "LayerNormalization"],
                            inputs={"ids": np.array([[1, 5, 7, 2]]), "pids": np.array([[3, 0, 9, 39]])})
    node = _embed_node(result.model)
    assert node.input[1] == "" and node.input[4] == ""  # no segment ids, no segment table
    assert node.input[8]  # the position ids
