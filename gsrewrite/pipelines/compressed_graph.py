"""What a compressed model's graph holds, counted from the graph itself (not from what a strategy says it did):
the nodes that run quantized ops, those that dequantize their weights at run time, those reading float16 /
bfloat16 weights, and those that keep float32 weights; and whether a strategy changed any weight at all.

Main graph only (a weight inside an If/Loop body is not counted). A weight is an initializer or a Constant
node's value, read directly or through a DequantizeLinear or a Cast (bf16's weights): what is stored counts.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.model_io.graph_walk import iter_nodes

T = onnx.TensorProto
#: ops that compute with quantized weights (onnxruntime's contrib ops and the standard integer ops)
QUANTIZED_OPS = frozenset({"MatMulInteger", "ConvInteger", "MatMulNBits", "MatMulBnb4", "MatMulIntegerToFloat",
                           "DynamicQuantizeMatMul", "QAttention", "QGemm", "DynamicQuantizeLSTM",
                           "QEmbedLayerNormalization", "GatherBlockQuantized", "QOrderedMatMul", "QOrderedAttention"})
#: ops that hold a model's weights (biases of Add and the like are not counted)
WEIGHT_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Gather", "Attention", "MultiHeadAttention",
                        "LSTM", "GRU", "RNN", "EmbedLayerNormalization", "Einsum"})
QUANTIZED_TYPES = frozenset({T.INT8, T.UINT8, T.INT4, T.UINT4, T.INT16, T.UINT16})
HALF_TYPES = frozenset({T.FLOAT16, T.BFLOAT16})
FULL_TYPES = frozenset({T.FLOAT, T.DOUBLE})
WIDENING = ("DequantizeLinear", "Cast")


@dataclass
class Census:
    """Nodes of a graph by how they hold their weights, each a count per op type."""

    quantized: Counter[str] = field(default_factory=Counter)
    dequantized: Counter[str] = field(default_factory=Counter)
    half: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)

    def text(self) -> str:
        """``25 node(s) run quantized ops (MatMulInteger 25), 1 keep float32 weights (Gemm 1)``."""
        parts = [f"{sum(counts.values())} {what} ({_by_op(counts)})" for what, counts in (
            ("node(s) run quantized ops", self.quantized), ("read quantized weights", self.dequantized),
            ("read float16/bfloat16 weights", self.half), ("keep float32 weights", self.kept)) if counts]
        return ", ".join(parts) if parts else "no node reads a weight"

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {"quantized": dict(self.quantized), "dequantized": dict(self.dequantized), "half": dict(self.half),
                "kept_float32": dict(self.kept)}


def census(model: onnx.ModelProto) -> Census:
    """Count the main graph's nodes of ``model`` by how they hold their weights."""
    graph = model.graph
    stored = {t.name: t.data_type for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                         None)
            if value is not None:
                stored[node.output[0]] = value.data_type
    widened = {node.output[0]: stored[node.input[0]] for node in graph.node if node.op_type in WIDENING
               and node.domain in ("", "ai.onnx") and node.input and node.input[0] in stored and node.output}
    result = Census()
    for node in graph.node:
        if node.op_type in QUANTIZED_OPS:
            result.quantized[node.op_type] += 1
            continue
        if node.op_type not in WEIGHT_OPS:
            continue
        kinds = {_kind(name, stored, widened) for name in node.input if name}
        for kind, counts in (("dequantized", result.dequantized), ("half", result.half), ("full", result.kept)):
            if kind in kinds:
                counts[node.op_type] += 1
                break
    return result


def _kind(name: str, stored: dict[str, int], widened: dict[str, int]) -> str | None:
    if name in widened:  # DequantizeLinear or Cast of a stored weight: by what is stored
        return "half" if widened[name] in HALF_TYPES else "dequantized" if widened[name] in QUANTIZED_TYPES else None
    kind = stored.get(name)
    if kind in QUANTIZED_TYPES:
        return "dequantized"  # a table gathered as integers, dequantized after (onnxruntime's Gather)
    if kind in HALF_TYPES:
        return "half"
    return "full" if kind in FULL_TYPES else None


def same_weights(before: onnx.ModelProto, after: onnx.ModelProto) -> bool:
    """True when ``after`` reads exactly the weights ``before`` reads (same types, shapes and bytes, whatever their
    names): a strategy that changed no weight compressed nothing."""
    return _weights(after) == _weights(before)


def _weights(model: onnx.ModelProto) -> Counter[tuple[Any, ...]]:
    read = {name for node in iter_nodes(model) for name in node.input} | {o.name for o in model.graph.output}
    found: Counter[tuple[Any, ...]] = Counter()
    for tensor in model.graph.initializer:
        if tensor.name in read:
            found[(tensor.data_type, tuple(tensor.dims), _digest(tensor))] += 1
    return found


def _digest(tensor: onnx.TensorProto) -> str:
    if tensor.HasField("raw_data"):
        return hashlib.blake2b(tensor.raw_data, digest_size=16).hexdigest()
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.ClearField("name")
    return hashlib.blake2b(copy.SerializeToString(), digest_size=16).hexdigest()


def _by_op(counts: Counter[str]) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
