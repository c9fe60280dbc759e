"""``dynamic-int8`` written weight by weight: the graph and the bytes onnxruntime's ``quantize_dynamic`` makes for
MatMul and Gather (the transformer case), without its copies of the model.

onnxruntime's quantizer takes the model whole (a shape-inferred copy, the quantized weights beside the float ones,
then a save): 3.2x the weight bytes at its peak on a 2.3 GB decoder. Here each weight is read (from the model's
files when it was loaded weightless), quantized and dropped before the next one, and the output model holds only
the weights it changed. The numerics are onnxruntime's own functions (``compute_data_quant_params``,
``quantize_nparray``), applied a slice of rows at a time, so the codes, scales and zero points are onnxruntime's
byte for byte; the nodes are those it emits:

* a MatMul whose B is a float initializer: the activation through one ``DynamicQuantizeLinear`` per tensor (shared
  by its readers), ``MatMulInteger`` with the int8 weight (per tensor, or per output column with
  ``per_channel``), a ``Cast`` to float and a ``Mul`` by the product of the two scales;
* a Gather of a float table: the table stored uint8 (per tensor, asymmetric, as onnxruntime quantizes a Gather's
  data), the gathered codes read directly by a quantized MatMul and through a ``DequantizeLinear`` by anything
  else.

:func:`covers` says when that is all ``quantize_dynamic`` would do; otherwise (Conv, Attention, LSTM,
EmbedLayerNormalization, a Transpose of quantized codes, subgraphs, float16, opset 10 or older, a quantized
weight read by a node left float) the strategy hands the model to onnxruntime's quantizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from gsrewrite.plugin_api import tensor_values
from gsrewrite_builtins.compression.common import keep_used_initializers, placed, without_initializers

T = onnx.TensorProto
#: what this module writes; the other op types quantize_dynamic quantizes by default send the model to it
OWN_OPS = frozenset({"MatMul", "Gather"})
#: float elements quantized at once (onnxruntime's arithmetic makes a few temporaries of a slice's size)
SLICE_ELEMENTS = 1 << 22
SUFFIX = "_quantized"  # onnxruntime's TENSOR_NAME_QUANT_SUFFIX


@dataclass
class Settings:
    per_channel: bool = False
    reduce_range: bool = False
    symmetric: bool = True


@dataclass
class Written:
    model: onnx.ModelProto
    matmuls: list[str] = field(default_factory=list)
    gathers: list[str] = field(default_factory=list)
    left_float: dict[str, str] = field(default_factory=dict)  # node -> its weight holding NaN or infinity


@dataclass
class Step:
    """A node as the quantizer sees it: ``name`` decides exclusion (a Gemm's, for the MatMul + Add it becomes)."""

    node: onnx.NodeProto
    name: str


def as_matmuls(model: onnx.ModelProto, names: list[str], exclude: set[str]
               ) -> tuple[list[Step], dict[str, onnx.TensorProto]]:
    """The nodes with each Gemm (alpha = beta = 1, no transA) written as MatMul (+ Add), as quantize_dynamic
    rewrites them before quantizing (``replace_gemm_with_matmul``; a transposed weight becomes the initializer
    ``B_Transposed``, read transposed from B when quantized), except an excluded Gemm, which stays as it is. Returns
    the steps and the transposed weights by name -> their source tensor."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    taken = set(inits) | {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    taken |= {name for node in graph.node for name in (*node.input, *node.output)}
    transposed: dict[str, str] = {}
    sources: dict[str, onnx.TensorProto] = {}
    steps: list[Step] = []
    for node, name in zip(graph.node, names, strict=True):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or name in exclude \
                or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0):
            steps.append(Step(node, name))
            continue
        b = node.input[1]
        if attrs.get("transB", 0):
            if b in inits:
                if b not in transposed:
                    new, suffix = b + "_Transposed", 0
                    while any(new + end in taken for end in ("", SUFFIX, "_scale", "_zero_point")):
                        suffix += 1
                        new = f"{b}_Transposed_{suffix}"
                    taken.update(new + end for end in ("", SUFFIX, "_scale", "_zero_point"))
                    transposed[b], sources[new] = new, inits[b]
                b = transposed[b]
            else:
                transpose = helper.make_node("Transpose", [b], [b + "_Transposed"], name=name + "_Transpose")
                steps.append(Step(transpose, name))
                b += "_Transposed"
        out = node.output[0] + ("_MatMul" if len(node.input) > 2 else "")
        steps.append(Step(helper.make_node("MatMul", [node.input[0], b], [out], name=name + "_MatMul"), name))
        if len(node.input) > 2:
            steps.append(Step(helper.make_node("Add", [out, node.input[2]], list(node.output),
                                               name=name + "_Add"), name))
    return steps, sources


def _transposed_tensor(name: str, source: onnx.TensorProto) -> onnx.TensorProto:
    """A stand-in for ``B_Transposed``: the declaration only (its values are read from ``source``, transposed)."""
    tensor = onnx.TensorProto(name=name, data_type=source.data_type, dims=list(reversed(source.dims)))
    return tensor


def covers(model: onnx.ModelProto, names: list[str], op_types: set[str], exclude: set[str]) -> str | None:
    """None when quantize_dynamic would quantize only MatMuls and Gathers of ``model`` (whose nodes are called
    ``names``), and Transposes of what they quantized, in the forms this module writes; else why not (the strategy
    then runs onnxruntime's quantizer). Goes over the nodes in order, as the quantizer does."""
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset <= 10:
        return f"opset {opset}"
    inputs = {i.name for i in graph.input}
    inits = {t.name: t for t in graph.initializer}
    if inputs & set(inits):
        return "initializers that are also graph inputs"
    steps, sources = as_matmuls(model, names, exclude)
    inits.update({name: _transposed_tensor(name, source) for name, source in sources.items()})
    quantized: set[str] = set()  # values that have a quantized form at this point
    float_readers: list[tuple[str, str, set[str]]] = []
    for step in steps:
        node, name = step.node, step.name
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return f"{node.op_type} {name} holds a subgraph"
        chosen = node.op_type in op_types and name not in exclude and node.domain in ("", "ai.onnx")
        if chosen and node.op_type not in OWN_OPS and node.op_type != "Transpose":
            return f"{node.op_type} nodes"
        weight = _weight_input(node, inits) if chosen else None
        if weight is not None:
            if weight.data_type != T.FLOAT:
                return f"a {onnx.helper.tensor_dtype_to_np_dtype(weight.data_type)} weight ({weight.name})"
            if node.op_type == "MatMul" and node.input[0] in inits:
                return f"MatMul {name} of two initializers"
            quantized.add(weight.name)
            if node.op_type == "Gather":
                quantized.add(node.output[0])
            continue
        if chosen and node.op_type == "Transpose" and node.input and node.input[0] in quantized:
            quantized.add(node.output[0])  # a Transpose of codes (onnxruntime's Direct8BitOp)
            continue
        float_readers.append((node.op_type, name, {i for i in node.input if i in inits}))
    for op_type, name, read in float_readers:
        shared = read & quantized
        if shared:
            return f"weight {sorted(shared)[0]} is also read by {op_type} {name}, left float"
    return None


def unfused_heads(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy in which each ``FusedMatMul(x, W, transB = 1)`` of a weight an embedding Gather reads
    too (a tied LM head, as the ``matmul-transposed`` fusion writes it) is ``MatMul(x, Transpose(W))`` again, the
    form the exporter wrote and this module quantizes as onnxruntime does (the Gather's table quantized, the head
    left float); other onnxruntime ops are left as they are. The copy holds the initializers again: references for a
    model read weightless, payloads otherwise."""
    graph = model.graph
    tables = {n.input[0] for n in graph.node if n.op_type == "Gather" and n.domain in ("", "ai.onnx") and n.input}
    heads = [n for n in graph.node if n.op_type == "FusedMatMul" and n.domain == "com.microsoft"
             and len(n.input) == 2 and n.input[1] in tables and _plain_trans_b(n)]
    if not heads:
        return model
    from gsrewrite.plugin_api import copy_fields

    chosen = {id(n) for n in heads}
    out = onnx.ModelProto()
    copy_fields(out, model, skip=("graph",))
    copy_fields(out.graph, graph, skip=("node",))
    for node in graph.node:
        if id(node) not in chosen:
            out.graph.node.append(node)
            continue
        name = node.name or node.output[0]
        out.graph.node.extend([
            helper.make_node("Transpose", [node.input[1]], [f"{name}_weight_t"], f"{name}_Transpose", perm=[1, 0]),
            helper.make_node("MatMul", [node.input[0], f"{name}_weight_t"], list(node.output), name)])
    return out


def _plain_trans_b(node: onnx.NodeProto) -> bool:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return attrs.get("transB", 0) == 1 and not attrs.get("transA", 0) and attrs.get("alpha", 1.0) == 1.0 \
        and not attrs.get("transBatchA", 0) and not attrs.get("transBatchB", 0)


def _weight_input(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> onnx.TensorProto | None:
    """The initializer quantize_dynamic quantizes for ``node``: a MatMul's B, a Gather's data."""
    if node.op_type == "MatMul" and len(node.input) > 1:
        return inits.get(node.input[1])
    if node.op_type == "Gather" and node.input:
        return inits.get(node.input[0])
    return None


class Writer:
    """One pass over the nodes in order, as onnxruntime's quantizer goes (its map of quantized values included).
    ``cache``: quantized weights by weight and settings, kept across runs on one model (a bisection's runs
    quantize only the weights no run quantized before)."""

    def __init__(self, source: onnx.ModelProto, names: list[str], settings: Settings, op_types: set[str],
                 exclude: set[str], cache: dict[Any, tuple[onnx.TensorProto, ...]]) -> None:
        self.source, self.names, self.settings = source, names, settings
        self.op_types, self.exclude, self.cache = op_types, exclude, cache
        self.inits = {t.name: t for t in source.graph.initializer}
        self.steps, self.sources = as_matmuls(source, names, exclude)
        self.inits.update({name: _transposed_tensor(name, tensor) for name, tensor in self.sources.items()})
        #: value -> (quantized name, scale name, zero point name, from an initializer)
        self.quantized: dict[str, tuple[str, str, str, bool]] = {}
        #: values no DequantizeLinear may produce: the graph's inputs and what the new graph computes so far
        self.generated: set[str] = {i.name for i in source.graph.input} - set(self.inits)
        self.nodes: list[onnx.NodeProto] = []
        self.tensors: list[onnx.TensorProto] = []
        self.made: set[str] = set()  # names of the nodes added (DynamicQuantizeLinear, scale Muls, ...)
        self.float_transposed: set[str] = set()
        self.new_keys: list[Any] = []  # the cache entries this run made

    def write(self) -> Written:
        model = without_initializers(self.source)
        written = Written(model)
        for step in self.steps:
            node, name = step.node, step.name
            start = len(self.nodes)
            kind = self._node(node, name, written)
            if kind is None:
                self._dequantized_inputs(node)
                copy = onnx.NodeProto()
                copy.CopyFrom(node)
                copy.name = node.name or name
                self.nodes.append(copy)
                for value in node.input:  # a MatMul left float reads B_Transposed: it is made after all
                    if value in self.sources and value not in self.float_transposed:
                        self.float_transposed.add(value)
                        self.tensors.append(onnx.numpy_helper.from_array(
                            np.ascontiguousarray(tensor_values(self.sources[value]).T), value))
            for added in self.nodes[start:]:
                self.generated.update(added.output)
        for output in model.graph.output:
            self._dequantized_inputs_of([output.name])
        del model.graph.node[:]
        model.graph.node.extend(self.nodes)
        model.graph.initializer.extend(self.tensors)
        for key in self.new_keys:  # the cache refers to the model's copies: no second copy of the codes
            self.cache[key] = placed(model.graph, self.cache[key])
        keep_used_initializers(model, self.source)
        return written

    def _node(self, node: onnx.NodeProto, name: str, written: Written) -> str | None:
        if node.op_type not in self.op_types or name in self.exclude or node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Transpose" and node.input and node.input[0] in self.quantized:
            codes = onnx.NodeProto()  # the codes transposed, with the scale and zero point of its input
            codes.CopyFrom(node)
            codes.name = node.name or name
            entry = self.quantized[node.input[0]]
            codes.input[0] = entry[0]
            codes.output[0] = node.output[0] + SUFFIX
            self.quantized[node.output[0]] = (codes.output[0], entry[1], entry[2], entry[3])
            self.nodes.append(codes)
            return "transpose"
        if node.op_type not in OWN_OPS:
            return None
        weight = _weight_input(node, self.inits)
        if weight is None or weight.data_type != T.FLOAT:
            return None
        if node.op_type == "Gather":
            qtype, symmetric, per_channel, reduce = T.UINT8, False, False, False  # a Gather's data: an activation
        else:
            qtype, symmetric = T.INT8, self.settings.symmetric
            per_channel, reduce = self.settings.per_channel, self.settings.reduce_range
        made = self._weight(weight, qtype, symmetric, per_channel, reduce)
        if made is None:
            written.left_float[name] = weight.name
            return None
        entry = made
        if node.op_type == "Gather":
            gather = onnx.NodeProto()
            gather.CopyFrom(node)
            gather.name = node.name or name
            gather.input[0] = entry[0]
            gather.output[0] = node.output[0] + SUFFIX
            self.quantized[node.output[0]] = (gather.output[0], entry[1], entry[2], False)
            self.nodes.append(gather)
            written.gathers.append(name)
            return "gather"
        self._matmul(node, name, entry)
        written.matmuls.append(name)
        return "matmul"

    def _weight(self, weight: onnx.TensorProto, qtype: int, symmetric: bool, per_channel: bool, reduce: bool
                ) -> tuple[str, str, str, bool] | None:
        """The quantized weight's names (made once per weight, as onnxruntime does; the first reader's form), or
        None when it holds NaN or infinity."""
        if weight.name in self.quantized:
            return self.quantized[weight.name]
        key = (weight.name, qtype, symmetric, per_channel, reduce)
        tensors = self.cache.get(key)
        if tensors is None:
            source = self.sources.get(weight.name)
            tensors = quantized_weight(weight, qtype, symmetric, per_channel, reduce,
                                       None if source is None else tensor_values(source).T)
            self.cache[key] = tensors
            self.new_keys.append(key)
        if not tensors:
            return None
        self.tensors.extend(tensors)
        codes, scale, zero = tensors
        self.quantized[weight.name] = entry = (codes.name, scale.name, zero.name, True)
        return entry

    def _matmul(self, node: onnx.NodeProto, name: str, weight: tuple[str, str, str, bool]) -> None:
        a = node.input[0]
        if a not in self.quantized:
            self.quantized[a] = (a + SUFFIX, a + "_scale", a + "_zero_point", False)
            self._add(helper.make_node("DynamicQuantizeLinear", [a], [a + SUFFIX, a + "_scale", a + "_zero_point"],
                                       a + "_QuantizeLinear"))
        a_q, a_scale, a_zero, _ = self.quantized[a]
        base = (node.name or name) + "_quant"
        integer = node.output[0] + "_output_quantized"
        self._add(helper.make_node("MatMulInteger", [a_q, weight[0], a_zero, weight[2]], [integer], base))
        self._add(helper.make_node("Cast", [integer], [integer + "_cast_output"], integer + "_cast", to=T.FLOAT))
        if base + "_scales_mul" not in self.made:
            self._add(helper.make_node("Mul", [a_scale, weight[1]], [base + "_scales_mul:0"], base + "_scales_mul"))
        self._add(helper.make_node("Mul", [integer + "_cast_output", base + "_scales_mul:0"], [node.output[0]],
                                   base + "_output_scale_mul"))

    def _add(self, node: onnx.NodeProto) -> None:
        self.nodes.append(node)
        self.made.add(node.name)

    def _dequantized_inputs(self, node: onnx.NodeProto) -> None:
        self._dequantized_inputs_of(node.input)

    def _dequantized_inputs_of(self, names: Any) -> None:
        """A DequantizeLinear for each quantized value (codes a Gather made) read as float (onnxruntime's
        ``_dequantize_value``: once per value)."""
        for value in names:
            entry = self.quantized.get(value)
            if entry is None or value in self.generated or value + "_DequantizeLinear" in self.made:
                continue
            self._add(helper.make_node("DequantizeLinear", [entry[0], entry[1], entry[2]], [value],
                                       value + "_DequantizeLinear"))
            self.generated.add(value)


def quantized_weight(weight: onnx.TensorProto, qtype: int, symmetric: bool, per_channel: bool, reduce: bool,
                     values: np.ndarray | None = None) -> tuple[onnx.TensorProto, ...]:
    """The codes, scale and zero point onnxruntime's quantizer stores for ``weight`` (per tensor, or per last-axis
    channel), or () when it holds NaN or infinity (left float, as the strategy reports). The float weight is read
    here (``values``: given, for a transposed stand-in) and dropped on return."""
    from onnxruntime.quantization.quant_utils import compute_data_quant_params, quantize_nparray

    values = np.ascontiguousarray(tensor_values(weight) if values is None else values)
    flat = values.reshape(-1)
    if not all(np.isfinite(flat[i:i + SLICE_ELEMENTS]).all() for i in range(0, flat.size, SLICE_ELEMENTS)):
        return ()
    if per_channel and values.ndim:
        low, high = values.min(axis=tuple(range(values.ndim - 1))), values.max(axis=tuple(range(values.ndim - 1)))
        params = [compute_data_quant_params(np.array([lo, hi], dtype=values.dtype), qtype, symmetric, reduce)
                  for lo, hi in zip(low.reshape(-1), high.reshape(-1), strict=True)]
        zero = np.array([p[0] for p in params]).reshape(-1)
        scale = np.array([p[1] for p in params]).reshape(-1)
        rows = values.reshape(-1, values.shape[-1])
        scale_dims: list[int] = [values.shape[-1]]
    else:
        zero, scale = compute_data_quant_params(flat, qtype, symmetric, reduce)
        rows = flat.reshape(-1, 1) if flat.size else flat.reshape(0, 1)
        scale_dims = []
    step = max(1, SLICE_ELEMENTS // max(1, rows.shape[1]))
    codes = np.empty(rows.shape, dtype=helper.tensor_dtype_to_np_dtype(qtype))
    for start in range(0, rows.shape[0], step):
        codes[start:start + step] = quantize_nparray(qtype, rows[start:start + step], scale, zero)
    del values, flat, rows
    name = weight.name
    stored = onnx.numpy_helper.from_array(codes.reshape(tuple(weight.dims)), name + SUFFIX)
    return (stored,
            helper.make_tensor(name + "_scale", weight.data_type, scale_dims, np.asarray(scale).reshape(-1).tolist()),
            helper.make_tensor(name + "_zero_point", qtype, scale_dims, np.asarray(zero).reshape(-1).tolist()))
