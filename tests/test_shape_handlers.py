"""Replacement-made contrib op outputs get the types onnxruntime's schemas give them (never overriding one)."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.shapes.handlers import annotate_node as annotate

F32 = np.dtype(np.float32)


def _node(op: str, inputs: list[gs.Tensor], outputs: int = 1, **attrs: object) -> gs.Node:
    return gs.Node(op, inputs=inputs, outputs=[gs.Variable(f"o{i}") for i in range(outputs)], attrs=attrs,
                   domain="com.microsoft")


def test_attention_family_outputs():
    x = gs.Variable("x", F32, ["batch", "seq", 8])
    packed = gs.Constant("w", np.zeros((8, 24), np.float32))
    attention = _node("Attention", [x, packed])
    annotate(attention)
    assert attention.outputs[0].shape == ["batch", "seq", 8] and attention.outputs[0].dtype == F32
    v = gs.Variable("v", F32, ["batch", "kv", 16])
    mha = _node("MultiHeadAttention", [x, gs.Variable("k", F32, ["batch", "kv", 8]), v])
    annotate(mha)
    assert mha.outputs[0].shape == ["batch", "seq", 16]
    gqa = _node("GroupQueryAttention", [x, gs.Variable("k", F32, ["batch", "seq", 4]), v], outputs=3)
    annotate(gqa)
    assert gqa.outputs[0].shape == ["batch", "seq", 8] and gqa.outputs[1].shape is None
    # packed QKV [B, S, (4 + 2 * 2) * 16]: the output is [B, S, 4 * 16]
    qkv = gs.Variable("qkv", F32, ["batch", "seq", 128])
    packed_gqa = _node("GroupQueryAttention", [qkv, gs.Variable.empty(), gs.Variable.empty()], outputs=3,
                       num_heads=4, kv_num_heads=2)
    annotate(packed_gqa)
    assert packed_gqa.outputs[0].shape == ["batch", "seq", 64]


def test_normalizations_and_embeddings():
    x = gs.Variable("x", F32, [2, 5, 8])
    skip = _node("SkipLayerNormalization", [x, x], outputs=4)
    annotate(skip)
    assert skip.outputs[0].shape == [2, 5, 8] and skip.outputs[3].shape == [2, 5, 8] and skip.outputs[1].shape is None
    ids = gs.Variable("ids", np.dtype(np.int32), ["b", "s"])
    table = gs.Constant("t", np.zeros((100, 8), np.float32))
    embed = _node("EmbedLayerNormalization", [ids, ids, table], outputs=2)
    annotate(embed)
    assert embed.outputs[0].shape == ["b", "s", 8] and embed.outputs[1].shape == ["b"]


def test_known_types_and_unknown_inputs_are_left_alone():
    typed = gs.Variable("typed", F32, [1, 2, 3])
    gelu = gs.Node("FastGelu", inputs=[gs.Variable("x", F32, [4, 4, 4])], outputs=[typed], domain="com.microsoft")
    annotate(gelu)
    assert typed.shape == [1, 2, 3]  # never changed
    unknown = _node("MultiHeadAttention", [gs.Variable("q"), gs.Variable("k"), gs.Variable("v")])
    annotate(unknown)
    assert unknown.outputs[0].shape is None
    standard = gs.Node("Relu", inputs=[gs.Variable("x", F32, [2])], outputs=[gs.Variable("y")])
    annotate(standard)
    assert standard.outputs[0].shape is None  # only contrib ops have rules here
