"""The ``unpadded`` contract: no padding anywhere, so GroupQueryAttention needs nothing from the mask but lengths.

An export turns the attention mask into an additive bias [batch, 1, new tokens, past + new] (causal and padding
terms; some 40 small nodes a step: Range, comparisons, Expand, Where, ~0.2 ms of SmolLM2-135M's 8 ms int4 decode
step) and the fusion hands it to GroupQueryAttention as ``attention_bias`` with ``causal`` 0. When every mask
value is 1 and positions run on from the past length (what onnxruntime-genai's generate loop feeds at batch 1,
and what its builder's graphs assume), that bias is only the causal mask, which GroupQueryAttention applies by
itself: the bias goes (``causal`` 1), the sequence lengths are read off the mask as the builder reads them
(``ReduceSum(mask) - 1`` and the mask's length), and where the rotary tables are constants indexed by absolute
position, the position ids go too (GroupQueryAttention then rotates token ``s`` of a step by ``past + s``: checked
in onnxruntime 1.32 at prompts, chunks and decode steps, with and without a shared buffer).

The bias is dropped only where it is proven to be exactly what GroupQueryAttention masks by itself: its own
subgraph is evaluated in onnxruntime with a mask of ones for prompts, chunks and decode steps at batch 1 and 2 and
for a decode step at the longest position the model runs (``rows``), and every entry must be 0 where
GroupQueryAttention lets the query see the key (causal, within ``local_window_size``) and at most
:data:`MASKED` elsewhere (its softmax weight then underflows to exactly 0). A bias with any other term (ALiBi, a
window GroupQueryAttention does not know, a soft-cap) keeps the node as it is, with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gsrewrite.pipelines.decoder_signature import DecoderSignature
from gsrewrite.pipelines.layout_subgraph import layout_model, layout_session, prune

log = logging.getLogger(__name__)

#: the largest value a masked bias entry may have: exp(MASKED + any real score gap) is exactly 0 in float32/16
MASKED = -1e4
#: the largest constant (bytes) the bias subgraph may read: a stored causal table (GPT-2's is 1 MiB), never a weight
_LARGEST = 1 << 26
#: GroupQueryAttention's inputs: seqlens_k, total_sequence_length, cos/sin caches, position ids, attention bias
_SEQLENS, _TOTAL, _COS, _SIN, _POSITIONS, _BIAS = 5, 6, 7, 8, 9, 10
_PREFIX = "unpadded"


def drop_padding_bias(model: onnx.ModelProto, signature: DecoderSignature, rows: int) -> int | str:
    """Make every GroupQueryAttention of ``model`` (changed in place) that reads a bias proven to be its own causal
    mask under an all-ones mask take no bias and read its lengths from the mask; the number of nodes changed, or
    why none (``model`` unchanged). ``rows``: the longest sequence the model will run (the decode step proven at
    its last position)."""
    if signature.attention_mask is None:
        return "the model has no attention mask"
    users = _bias_users(model.graph)
    if not users:
        return "no GroupQueryAttention reads an attention bias"
    biases = sorted({node.input[_BIAS] for node in users})
    windows = {bias: sorted({_window(node) for node in users if node.input[_BIAS] == bias}) for bias in biases}
    mixed = next((bias for bias in biases if len(windows[bias]) > 1), None)
    if mixed is not None:
        return f"the bias {mixed!r} is read by GroupQueryAttention nodes with different windows {windows[mixed]}"
    fed = {name for name in (signature.input_ids, signature.attention_mask, signature.position_ids) if name}
    sub = layout_model(model, biases, fed | set(signature.pairs), "the attention bias", _LARGEST)
    if isinstance(sub, str):
        return sub
    proven = _prove(sub, biases, {bias: windows[bias][0] for bias in biases}, signature, model, rows)
    if isinstance(proven, str):
        return proven
    (seqlens, total), made = _lengths(model, signature.attention_mask)
    constants = {t.name for t in model.graph.initializer}
    for node in users:
        inputs = list(node.input)
        inputs[_SEQLENS], inputs[_TOTAL], inputs[_BIAS] = seqlens, total, ""
        if inputs[_POSITIONS] and inputs[_COS] in constants and inputs[_SIN] in constants:
            inputs[_POSITIONS] = ""  # tables by absolute position: GroupQueryAttention counts from the past length
        while inputs and not inputs[-1]:
            inputs.pop()
        del node.input[:]
        node.input.extend(inputs)
        attributes = [a for a in node.attribute if a.name != "causal"]
        del node.attribute[:]
        node.attribute.extend([*attributes, helper.make_attribute("causal", 1)])
    nodes = [*made, *model.graph.node]  # after the nodes above are changed: the repeated field copies them
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    removed = prune(model.graph)
    log.info("unpadded: %d GroupQueryAttention node(s) without the mask's bias; %d node(s) gone", len(users),
             removed)
    return len(users)


def _bias_users(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    return [node for node in graph.node if node.domain == "com.microsoft" and node.op_type == "GroupQueryAttention"
            and len(node.input) > _BIAS and node.input[_BIAS]]


def _window(node: onnx.NodeProto) -> int:
    """The node's ``local_window_size`` (-1: none)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    window = int(attrs.get("local_window_size", -1))
    return window if window >= 0 else -1


def layouts(rows: int, batches: Sequence[int]) -> list[tuple[int, int, int]]:
    """(batch, past, new tokens) the bias is proven at: prompts, a chunk and decode steps at each batch, and a
    decode step at the last of ``rows`` positions."""
    out = []
    for batch in batches:
        out += [(batch, 0, 1), (batch, 0, 6), (batch, 5, 3), (batch, 9, 1)]
    out.append((batches[0], max(rows - 1, 0), 1))
    return out


def _prove(sub: onnx.ModelProto, biases: list[str], windows: dict[str, int], signature: DecoderSignature,
           model: onnx.ModelProto, rows: int) -> str | None:
    """None when every bias is GroupQueryAttention's own mask at every :func:`layouts`; else why not."""
    try:
        session = layout_session(sub)
    except Exception as error:
        return f"the attention bias could not be evaluated: {type(error).__name__}: {str(error)[:200]}"
    specs = {value.name: value for value in sub.graph.input}
    fixed = _fixed_batch(model, signature.input_ids)
    for batch, past, new in layouts(rows, [fixed] if fixed else [1, 2]):
        feeds = {name: _feed(name, spec, signature, batch, past, new) for name, spec in specs.items()}
        try:
            got = dict(zip(biases, session.run(biases, feeds), strict=True))
        except Exception as error:
            return f"the attention bias could not be evaluated at past {past}, {new} new token(s): " \
                   f"{type(error).__name__}: {str(error)[:200]}"
        for bias, value in got.items():
            reason = _differs(np.asarray(value), batch, past, new, windows[bias])
            if reason is not None:
                return f"the attention bias {bias!r} with a mask of ones at batch {batch}, past {past}, {new} new " \
                       f"token(s) {reason}: it is not only GroupQueryAttention's own causal mask"
    return None


def _fixed_batch(model: onnx.ModelProto, ids: str) -> int | None:
    spec = next((value for value in model.graph.input if value.name == ids), None)
    dims = spec.type.tensor_type.shape.dim if spec is not None else []
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None


def _feed(name: str, spec: onnx.ValueInfoProto, signature: DecoderSignature, batch: int, past: int, new: int
          ) -> np.ndarray:
    dtype = helper.tensor_dtype_to_np_dtype(spec.type.tensor_type.elem_type)
    if name == signature.attention_mask:
        return np.ones((batch, past + new), dtype)
    if name == signature.position_ids:
        return np.broadcast_to(np.arange(past, past + new), (batch, new)).astype(dtype)
    if name in signature.pairs:  # the cache: its shape only
        return np.zeros((batch, signature.kv_heads, past, signature.head_size), dtype)
    return np.zeros((batch, new), dtype)  # the token ids: their shape only


def _differs(bias: np.ndarray, batch: int, past: int, new: int, window: int) -> str | None:
    """Why ``bias`` is not GroupQueryAttention's own mask (0 where it lets query i see key j: j <= past + i, and
    past + i - window < j with a window; <= :data:`MASKED` elsewhere); None when it is."""
    if bias.ndim != 4 or bias.shape[2] != new or bias.shape[3] != past + new or bias.shape[0] not in (1, batch):
        return f"has shape {list(bias.shape)}, not [batch, heads, {new}, {past + new}]"
    query = past + np.arange(new)[:, None]
    key = np.arange(past + new)[None, :]
    visible = key <= query
    if window >= 0:  # onnxruntime 1.32 (CPU): the query and the window - 1 keys before it (measured)
        visible &= key > query - window
    values = bias.astype(np.float64)
    if np.any(values[..., visible] != 0):
        return "is not 0 at every key the query sees"
    if np.any(values[..., ~visible] > MASKED):
        return f"is above {MASKED:g} at a key the query must not see"
    return None


def _lengths(model: onnx.ModelProto, mask: str) -> tuple[tuple[str, str], list[onnx.NodeProto]]:
    """GroupQueryAttention's ``seqlens_k`` (the mask's sum - 1, int32 [batch]) and ``total_sequence_length`` (the
    mask's length, int32 scalar), as onnxruntime-genai's builder computes them, and the nodes that make them (their
    constants added to ``model``)."""
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    names = {key: f"{_PREFIX}/{key}" for key in ("mask32", "sum", "one", "seqlens", "shape", "index", "total64",
                                                 "total", "axes")}
    graph.initializer.extend([numpy_helper.from_array(np.array(1, np.int32), names["one"]),
                              numpy_helper.from_array(np.array(1, np.int64), names["index"])])
    if opset >= 13:
        graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), names["axes"]))
        summed = helper.make_node("ReduceSum", [names["mask32"], names["axes"]], [names["sum"]], keepdims=0,
                                  name=names["sum"])
    else:
        summed = helper.make_node("ReduceSum", [names["mask32"]], [names["sum"]], axes=[1], keepdims=0,
                                  name=names["sum"])
    made = [
        helper.make_node("Cast", [mask], [names["mask32"]], to=onnx.TensorProto.INT32, name=names["mask32"]),
        summed,
        helper.make_node("Sub", [names["sum"], names["one"]], [names["seqlens"]], name=names["seqlens"]),
        helper.make_node("Shape", [mask], [names["shape"]], name=names["shape"]),
        helper.make_node("Gather", [names["shape"], names["index"]], [names["total64"]], axis=0,
                         name=names["total64"]),
        helper.make_node("Cast", [names["total64"]], [names["total"]], to=onnx.TensorProto.INT32,
                         name=names["total"]),
    ]
    return (names["seqlens"], names["total"]), made
