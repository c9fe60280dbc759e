"""The ``shared-kv-buffer`` contract: past and present share one buffer of the longest length, as onnxruntime-genai's
generate loop allocates it (``past_present_share_buffer``).

GroupQueryAttention supports that by itself: given a past buffer of ``max_length`` positions it reads the first
``seqlens_k + 1 - new`` of them, writes the new keys and values after them and returns the buffer (the present
then has the buffer's length, not past + new). What the rest of the graph must stop doing is reading the past
length from the past's shape (the exporter's causal mask and position arithmetic do): every ``Shape`` of a past
input (or of a present) is replaced by the shape it had without the buffer, its length taken from the attention
mask, which the loop still grows token by token (``past = mask length - new tokens``). Any other reader of the
cache, or a present not made by GroupQueryAttention, leaves the model as it is, with the reason.
"""

from __future__ import annotations

import logging

import onnx
from onnx import helper

from gsrewrite.contracts import BUFFER_DIM
from gsrewrite.pipelines.decoder_signature import DecoderSignature

log = logging.getLogger(__name__)

_PREFIX = "shared-kv-buffer"


def share_kv_buffer(model: onnx.ModelProto, signature: DecoderSignature) -> onnx.ModelProto | str:
    """``model`` (a copy) reading its past length from the mask, so that past and present may be one buffer; or
    why it cannot."""
    if signature.attention_mask is None:
        return "the model has no attention mask to take the valid cache length from"
    graph = model.graph
    attention = cache_attention(model, signature)
    if isinstance(attention, str):
        return attention
    presents = set(signature.pairs.values())
    readers: dict[int, str] = {}  # node index -> the length its Shape reads: the past's or past + new
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name in signature.pairs or name in presents:
                if node.op_type == "Shape":
                    readers[index] = "past" if name in signature.pairs else "total"
                elif node.op_type != "GroupQueryAttention" or name in presents:
                    return f"{node.op_type} node {node.name!r} reads the cache {name!r} (only GroupQueryAttention " \
                           "and Shape may)"
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _replace_shapes(out.graph, readers, signature)
    for value in [*out.graph.input, *out.graph.output]:
        if value.name in signature.pairs or value.name in presents:
            dims = value.type.tensor_type.shape.dim
            if len(dims) == 4:
                dims[2].Clear()
                dims[2].dim_param = BUFFER_DIM
    log.info("shared-kv-buffer: %d Shape node(s) of the cache now read the mask's length", len(readers))
    return out


def cache_attention(model: onnx.ModelProto, signature: DecoderSignature) -> list[onnx.NodeProto] | str:
    """The GroupQueryAttention node of each layer, which takes its past and makes its present; or why there is
    none (a present made another way)."""
    producers = {out: node for node in model.graph.node for out in node.output}
    nodes: list[onnx.NodeProto] = []
    for layer in signature.layers:
        node = producers.get(layer.present_key)
        if node is None or node.op_type != "GroupQueryAttention" or list(node.input[3:5]) != [
                layer.past_key, layer.past_value] or list(node.output[1:3]) != [layer.present_key, layer.present_value]:
            return f"{layer.present_key!r} is not the present GroupQueryAttention makes from {layer.past_key!r} " \
                   "(fuse the attention: --contract batch1-chunks)"
        nodes.append(node)
    return nodes


def _replace_shapes(graph: onnx.GraphProto, readers: dict[int, str], signature: DecoderSignature) -> None:
    """Each ``Shape`` of the cache becomes the cache's shape without the buffer: [batch (the token ids'), KV heads,
    past (mask length - new tokens) or past + new (mask length), head size]."""
    assert signature.attention_mask is not None

    def ints(name: str, values: list[int]) -> str:
        graph.initializer.append(helper.make_tensor(f"{_PREFIX}/{name}", onnx.TensorProto.INT64, [len(values)],
                                                    values))
        return f"{_PREFIX}/{name}"

    zero, one, two = ints("zero", [0]), ints("one", [1]), ints("two", [2])
    heads, size = ints("kv_heads", [signature.kv_heads]), ints("head_size", [signature.head_size])
    mask_shape, ids_shape = f"{_PREFIX}/mask_shape", f"{_PREFIX}/ids_shape"
    total, new, past, batch = (f"{_PREFIX}/{name}" for name in ("total", "new", "past", "batch"))
    nodes = [
        helper.make_node("Shape", [signature.attention_mask], [mask_shape], name=mask_shape),
        helper.make_node("Slice", [mask_shape, one, two], [total], name=total),
        helper.make_node("Shape", [signature.input_ids], [ids_shape], name=ids_shape),
        helper.make_node("Slice", [ids_shape, zero, one], [batch], name=batch),
        helper.make_node("Slice", [ids_shape, one, two], [new], name=new),
        helper.make_node("Sub", [total, new], [past], name=past),
    ]
    shapes = {kind: f"{_PREFIX}/{kind}_shape" for kind in ("past", "total")}
    nodes += [helper.make_node("Concat", [batch, heads, length, size], [shapes[kind]], axis=0, name=shapes[kind])
              for kind, length in (("past", past), ("total", total))]
    for index, node in enumerate(graph.node):
        kind = readers.get(index)
        if kind is None:
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if not attrs:
            nodes.append(helper.make_node("Identity", [shapes[kind]], [node.output[0]], name=node.name))
            continue
        # Shape's start/end: the same part of the whole shape (Slice clamps and wraps as Shape does)
        bounds = [ints(f"{index}/start", [attrs.get("start", 0)]), ints(f"{index}/end", [attrs.get("end", 4)])]
        nodes.append(helper.make_node("Slice", [shapes[kind], *bounds], [node.output[0]], name=node.name))
    del graph.node[:]
    graph.node.extend(nodes)
