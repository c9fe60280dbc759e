"""``int8`` and ``int4``: weight-only quantization of MatMul / Gemm weights (and Conv weights at 8 bits).

* ``--target ort`` (default): MatMul and Gemm become com.microsoft ``MatMulNBits`` (blocked, 4 or 8 bits; the
  kernel onnxruntime runs for LLM weights). Conv weights (int8) use ``DequantizeLinear``.
* ``--target onnx``: the weight is stored quantized and a standard ``DequantizeLinear`` feeds the original op
  (per-tensor / per-channel from opset 13; blocked and 4-bit types need opset 21, which the strategy raises to
  only with ``allow_opset_upgrade``).

Options: ``symmetric`` (default True: no zero points, the tied LM head and its table included unless
``head_symmetric`` says otherwise), ``granularity`` (tensor | channel |
block; default block for int4, channel for int8 at ``--target onnx``; MatMulNBits is always blocked),
``block_size`` (16-256, default 32),
``method`` (``rtn``: round to nearest; ``search``: k-quant style scale search, numerics.search_groups; default
``search`` at 4 bits, ``rtn`` at 8), ``activations`` (default True: the search weights each element by its input
channel's squared activations, measured on ``calibration`` inputs (.npz file or folder), else generated ones),
``head_bits`` (4 or 8: a tied LM head's and its embedding table's, default the strategy's bits),
``head_symmetric`` (the tied head and its table without zero points; default ``symmetric``: on SmolLM2-135M
their zero points bought no KL (0.213 either way, 480 positions: benchmarks/results/int4_quality.md) and cost
~0.2 ms of an 8 ms int4 decode step),
``accuracy_level`` (MatMulNBits' attribute, 0-4: 4 computes with int8 activations; unset, the compress pipeline
measures 0 and 4 and keeps the faster), ``target``, ``min_elements`` (smaller weights stay float, default 4096),
``exclude`` (node names), ``op_types`` (default MatMul, Gemm, and Conv at 8 bits), ``allow_opset_upgrade``.

A tied embedding (a table both an embedding Gather and the LM head's ``MatMul(x, Transpose(W))`` read) is quantized
once, in MatMulNBits' layout: the head's MatMulNBits reads the codes, scales and zero points, and the Gather becomes
com.microsoft ``GatherBlockQuantized`` over the same tensors (its uint8 layout is MatMulNBits', reshaped to
[vocab, hidden / 2]), as the onnxruntime-genai builder does.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gsrewrite.plugin_api import Tolerance, UsageError, tensor_values
from gsrewrite_builtins.compression.common import (
    Compressed,
    consumers,
    initializer_map,
    keep_used_initializers,
    placed,
    unique_name,
    without_initializers,
)
from gsrewrite_builtins.compression.numerics import QuantSpec, matmul_nbits, pack_int4, quantize

log = logging.getLogger(__name__)
TARGETS = ("ort", "onnx")
METHOD_TEXT = {"rtn": "round to nearest", "search": "scale search"}
OPTIONS = ("symmetric", "granularity", "block_size", "method", "activations", "calibration", "accuracy_level",
           "head_bits", "head_symmetric", "target", "min_elements", "exclude", "allow_opset_upgrade", "op_types")
#: accuracy_level values MatMulNBits takes (0: unset, onnxruntime's default; 4: int8 activations)
ACCURACY_LEVELS = (0, 1, 2, 3, 4)


@dataclass
class WeightOnly:
    bits: int
    name: str = ""
    description: str = ""
    tolerance: Tolerance = field(default_factory=lambda: Tolerance(min_cosine=0.99, min_agreement=0.98,
                                                                   min_top1=0.98))
    options: tuple[str, ...] = OPTIONS
    #: the quantizer when ``method`` is not given (``__post_init__``: ``search`` at 4 bits, ``rtn`` at 8)
    default_method: str = ""
    #: weights are read one at a time through plugin_api.tensor_values: a model whose weights stay in their files
    #: (references) is quantized without loading them all
    reads_references: bool = True
    #: each node's quantized form by the node and the settings, for the model quantized last (a bisection's runs
    #: quantize only the nodes no run quantized before)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    _cache_owner: Any = field(default=None, repr=False, compare=False)
    #: the activation statistics of the model quantized last, by calibration source
    _stats: dict[Any, dict[str, np.ndarray]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.name = self.name or f"int{self.bits}"
        self.description = self.description or (
            f"{self.bits}-bit weight-only quantization of MatMul/Gemm{' and Conv' if self.bits == 8 else ''} "
            "weights: MatMulNBits (--target ort) or DequantizeLinear (--target onnx)")
        if self.bits == 4:
            self.tolerance = Tolerance(min_cosine=0.95, min_agreement=0.95, min_top1=0.95)
        self.default_method = self.default_method or ("search" if self.bits == 4 else "rtn")

    def apply(self, model: onnx.ModelProto, **options: Any) -> Compressed:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise UsageError(f"strategy {self.name!r} has no option {unknown[0]!r} (options: {', '.join(OPTIONS)})")
        target = str(options.get("target") or "ort")
        if target not in TARGETS:
            raise UsageError(f"--target must be one of {', '.join(TARGETS)}, not {target!r}")
        # int4: symmetric blocks (MatMulNBits' int8-activation kernel runs them 1.27x faster than with zero points)
        given_symmetric = options.get("symmetric")
        symmetric = bool(given_symmetric) if given_symmetric is not None else True
        block_size = int(options.get("block_size") or 32)
        default_granularity = "block" if (self.bits == 4 or target == "ort") else "channel"
        granularity = str(options.get("granularity") or default_granularity)
        method = str(options.get("method") or self.default_method)
        try:
            QuantSpec(self.bits, symmetric, granularity, 0, block_size, method).validate()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        head_bits = int(options.get("head_bits") or self.bits)
        if head_bits not in (4, 8):
            raise UsageError(f"head_bits must be 4 or 8, not {head_bits}")
        level = options.get("accuracy_level")
        if level is not None and int(level) not in ACCURACY_LEVELS:
            raise UsageError(f"--accuracy-level must be one of {', '.join(map(str, ACCURACY_LEVELS))}, not {level}")
        if target == "ort" and granularity != "block":
            raise UsageError("--target ort emits MatMulNBits, which is blocked: use --granularity block "
                             "(or --target onnx for per-tensor / per-channel)")
        min_elements = int(options.get("min_elements") or 4096)
        exclude = set(options.get("exclude") or ())
        default_ops = ("MatMul", "Gemm", "Conv") if self.bits == 8 else ("MatMul", "Gemm")
        op_types = set(options.get("op_types") or default_ops)
        if self._cache_owner is not model:  # the cache holds one model's quantized nodes
            self._cache, self._cache_owner, self._stats = {}, model, {}
        calibration = options.get("calibration")
        weighted = method == "search" and bool(options.get("activations", True)) and granularity == "block"
        stats_note = ""
        stats: dict[str, np.ndarray] = {}
        if weighted:
            key = str(calibration or "generated")
            if key not in self._stats:
                self._stats[key] = _activation_statistics(model, calibration)
            stats = self._stats[key]
            where = "--calibration" if calibration else "generated"
            stats_note = f", weighted by each channel's squared inputs on {where} inputs" if stats else \
                ", activation statistics unavailable (see the log)"
        editor = _Editor(model, self.bits, symmetric, granularity, block_size, target, min_elements, exclude,
                         self._cache, method=method, accuracy_level=None if level is None else int(level),
                         statistics=stats, statistics_key=str(calibration or "generated") if stats else "")
        editor.op_types = op_types
        editor.head_bits = head_bits
        given_head = options.get("head_symmetric")
        editor.head_symmetric = symmetric if given_head is None else bool(given_head)
        if target == "onnx":
            editor.require_opset(bool(options.get("allow_opset_upgrade")))
        editor.run()
        notes = [f"{editor.quantized} weight(s) quantized to {self.bits} bits ({granularity}"
                 f"{f' {block_size}' if granularity == 'block' else ''}, "
                 f"{'symmetric' if symmetric else 'asymmetric'}, {METHOD_TEXT[method]}{stats_note}, target {target})"]
        if editor.per_channel_fallback:
            notes.append(f"{editor.per_channel_fallback} Conv weight(s) per output channel (DequantizeLinear: "
                         f"blocked only from opset 21)")
        if editor.skipped:
            notes.append(f"{len(editor.skipped)} left in float: " + "; ".join(editor.skipped[:5])
                         + (" ..." if len(editor.skipped) > 5 else ""))
        if editor.shared:
            notes.append(f"{len(editor.shared)} tied embedding table(s) quantized once: the LM head's MatMulNBits and "
                         "the embedding's GatherBlockQuantized read the same codes and scales")
        if editor.tied:
            notes.append(f"{editor.tied} LM head(s) share their weight with an embedding Gather: quantized as a copy, "
                         f"the Gather keeps the float table ({editor.tied_why or 'not a 2-D Gather on axis 0'})")
        if not editor.quantized and not editor.skipped:
            notes.append(_nothing_quantized(model, sorted(op_types), min_elements))
        return Compressed(editor.model, notes, quantized_nodes=editor.quantized_nodes)


class _Editor:
    """Builds the quantized model from ``source`` node by node: a weight is read, quantized and dropped before the
    next one; the quantized nodes and tensors of each node are kept in ``cache``."""

    def __init__(self, source: onnx.ModelProto, bits: int, symmetric: bool, granularity: str, block_size: int,
                 target: str, min_elements: int, exclude: set[str], cache: dict[Any, Any] | None = None, *,
                 method: str = "rtn", accuracy_level: int | None = None,
                 statistics: dict[str, np.ndarray] | None = None, statistics_key: str = "") -> None:
        self.source, self.model = source, without_initializers(source)
        self.bits, self.symmetric = bits, symmetric
        self.method, self.accuracy_level = method, accuracy_level
        #: activation name -> the sum of its squares per channel (the search's weights), and where they came from
        self.statistics, self.statistics_key = statistics or {}, statistics_key
        self.cache = cache if cache is not None else {}
        self.new_keys: list[Any] = []  # the cache entries this run made
        self.new_tensors: list[onnx.TensorProto] = []
        self.granularity, self.block_size, self.target = granularity, block_size, target
        self.min_elements, self.exclude = min_elements, exclude
        self.quantized = 0
        self.op_types: set[str] = {"MatMul", "Gemm", "Conv"}
        self.quantized_nodes: list[str] = []
        self.skipped: list[str] = []
        self.per_channel_fallback = 0
        #: tied LM heads whose weight an embedding Gather reads too, quantized as a copy (and why)
        self.tied = 0
        self.tied_why = ""
        #: tied tables quantized once: table name -> the MatMulNBits tensors (B, scales, zero points or "") the
        #: embedding's Gather reads too
        self.shared: dict[str, tuple[str, str, str, int]] = {}
        #: the bits of a tied LM head read through a transpose (and of its embedding table), and whether it is
        #: quantized without zero points
        self.head_bits = bits
        self.head_symmetric = symmetric
        #: Transposes of a weight whose MatMul now reads the weight itself (dropped with the rewrite)
        self.folded: set[str] = set()
        self.transposed: dict[str, onnx.NodeProto] = {}

    def _opset(self) -> int:
        opset = next((o for o in self.model.opset_import if o.domain in ("", "ai.onnx")), None)
        return opset.version if opset is not None else 0

    def require_opset(self, allow_upgrade: bool) -> None:
        needed = 21 if (self.bits == 4 or self.granularity == "block") else 13
        version = self._opset()
        if version >= needed:
            return
        if not allow_upgrade:
            raise UsageError(
                f"{self.bits}-bit {self.granularity} DequantizeLinear needs opset {needed}; the model is opset "
                f"{version}: allow the upgrade (--allow-opset-upgrade) or use --target ort")
        from onnx import version_converter

        try:
            upgraded = version_converter.convert_version(self.source, needed)
        except Exception as exc:  # the converter's own failure: say so, write nothing
            raise UsageError(f"onnx cannot convert the model to opset {needed}: {str(exc).splitlines()[0]}") \
                from None
        self.source, self.model = upgraded, without_initializers(upgraded)

    def run(self) -> None:
        graph, source = self.model.graph, self.source.graph
        inits = initializer_map(source)
        users = consumers(source)
        self.transposed = {n.output[0]: n for n in source.node if n.op_type == "Transpose" and len(n.input) == 1
                           and n.input[0] in inits and _perm(n) == [1, 0] and users.get(n.output[0], 0) == 1}
        new_nodes: list[onnx.NodeProto] = []
        for node in source.node:
            replacement = self._cached_replace(node, inits, users)
            new_nodes.extend(replacement if replacement is not None else [node])
        if self.shared:  # the embedding Gathers of a table quantized once (found at the head, after them)
            new_nodes = [n for node in new_nodes for n in (self._shared_gather(node) or [node])]
        del graph.node[:]
        graph.node.extend(n for n in new_nodes if not (n.op_type == "Transpose" and n.output[0] in self.folded))
        graph.initializer.extend(self.new_tensors)
        self.new_tensors = []
        for key in self.new_keys:  # the cache refers to the model's copies of the quantized tensors
            nodes, tensors, *rest = self.cache[key]
            self.cache[key] = (nodes, placed(graph, tensors), *rest)
        keep_used_initializers(self.model, self.source)
        if self.target == "ort" and self.quantized and not any(o.domain == "com.microsoft"
                                                               for o in self.model.opset_import):
            self.model.opset_import.append(helper.make_opsetid("com.microsoft", 1))

    def _cached_replace(self, node: onnx.NodeProto, inits: dict[str, onnx.TensorProto], users: dict[str, int]
                        ) -> list[onnx.NodeProto] | None:
        """:meth:`_replace`, or what it gave for the same node and settings before (nodes, tensors, counts)."""
        if not self._quantizable(node):
            return None
        transpose = self.transposed.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) > 1 else None
        key = (node.SerializeToString(), transpose.SerializeToString() if transpose is not None else b"",
               self.bits, self.symmetric, self.granularity, self.block_size, self.target, self.min_elements,
               self.method, self.accuracy_level, self.statistics_key, self.head_bits, self.head_symmetric,
               self._opset())
        hit = self.cache.get(key)
        if hit is None:
            marks = (len(self.new_tensors), len(self.skipped), len(self.quantized_nodes), self.per_channel_fallback,
                     set(self.folded), dict(self.shared), self.tied)
            nodes = self._replace(node, inits, users)
            hit = (nodes, self.new_tensors[marks[0]:], self.skipped[marks[1]:], self.quantized_nodes[marks[2]:],
                   self.per_channel_fallback - marks[3], self.folded - marks[4],
                   {k: v for k, v in self.shared.items() if k not in marks[5]}, self.tied - marks[6], self.tied_why)
            self.cache[key] = hit
            self.new_keys.append(key)
            return nodes
        nodes, tensors, skipped, quantized, fallback, folded, shared, tied, why = hit
        self.new_tensors.extend(tensors)
        self.skipped.extend(skipped)
        self.quantized_nodes.extend(quantized)
        self.quantized += len(quantized)
        self.per_channel_fallback += fallback
        self.folded |= folded
        self.shared.update(shared)
        self.tied += tied
        self.tied_why = self.tied_why or (why if tied else "")
        return nodes

    def _weight(self, node: onnx.NodeProto, index: int, inits: dict[str, onnx.TensorProto],
                users: dict[str, int], also_read: int = 0) -> np.ndarray | None:
        """The weight ``node`` reads at ``index`` as float32, None when it stays float (``also_read``: readers
        besides ``node`` that keep reading the float weight)."""
        if index >= len(node.input) or node.input[index] not in inits:
            return None
        tensor = inits[node.input[index]]
        if tensor.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
            return None
        if math.prod(tensor.dims) < self.min_elements:
            return None
        if users.get(tensor.name, 0) != 1 + also_read:
            self.skipped.append(f"{node.name or node.op_type}: weight {tensor.name!r} is shared")
            return None
        values = tensor_values(tensor).astype(np.float32, copy=False)
        if not np.isfinite(values).all():  # a scale of inf: every code of its group NaN
            self.skipped.append(f"{node.name or node.op_type}: weight {tensor.name!r} holds NaN or infinity")
            return None
        return values

    def _embedding_readers(self, name: str) -> int:
        """Gather nodes of the main graph that read ``name`` as their table, and only so."""
        return sum(1 for n in self.model.graph.node
                   if n.op_type == "Gather" and n.input[0] == name and name not in n.input[1:])

    def _quantizable(self, node: onnx.NodeProto) -> bool:
        """An op this run quantizes: the selected ONNX ops, and for onnxruntime a FusedMatMul when MatMul is."""
        if node.name in self.exclude:
            return False
        if node.domain in ("", "ai.onnx"):
            return node.op_type in self.op_types
        return node.domain == "com.microsoft" and node.op_type == "FusedMatMul" and "MatMul" in self.op_types \
            and self.target == "ort"

    def _replace(self, node: onnx.NodeProto, inits: dict[str, onnx.TensorProto], users: dict[str, int]
                 ) -> list[onnx.NodeProto] | None:
        if not self._quantizable(node):
            return None
        if node.op_type == "FusedMatMul":  # x @ W^T with W stored [N, K] (matmul-transposed: a tied LM head)
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if attrs.get("transA", 0) or not attrs.get("transB", 0) or attrs.get("alpha", 1.0) != 1.0 \
                    or attrs.get("transBatchA", 0) or attrs.get("transBatchB", 0) or len(node.input) != 2:
                return None
            embeddings = self._embedding_readers(node.input[1])  # GPT-2's wte: quantized once for both
            w = self._weight(node, 1, inits, users, also_read=embeddings)
            if w is None or w.ndim != 2:
                return None
            return self._head(node, node.input[1], inits[node.input[1]], w, embeddings)
        if node.op_type == "MatMul":
            transpose = self.transposed.get(node.input[1]) if len(node.input) > 1 else None
            if transpose is not None:  # a tied LM head: x @ W^T with W stored [N, K], as MatMulNBits keeps it
                # the embedding's Gather may read W too (GPT-2's tied wte): quantized once for both
                embeddings = self._embedding_readers(transpose.input[0])
                w = self._weight(transpose, 0, inits, users, also_read=embeddings)
                if w is None or w.ndim != 2 or self.target != "ort":
                    return None
                self.folded.add(transpose.output[0])
                return self._head(node, transpose.input[0], inits[transpose.input[0]], w, embeddings)
            w = self._weight(node, 1, inits, users)
            if w is None or w.ndim != 2:
                return None
            return self._linear(node, node.input[0], w, None, node.output[0])
        if node.op_type == "Gemm":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
                return None
            w = self._weight(node, 1, inits, users)
            if w is None or w.ndim != 2:
                return None
            w = w.T if attrs.get("transB", 0) else w
            bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
            return self._linear(node, node.input[0], w, bias, node.output[0])
        if node.op_type == "Conv" and self.bits == 8:
            w = self._weight(node, 1, inits, users)
            if w is None:
                return None
            return self._dequantized(node, 1, w, axis=0)
        return None

    def _head(self, node: onnx.NodeProto, table: str, tensor: onnx.TensorProto, w: np.ndarray, embeddings: int
              ) -> list[onnx.NodeProto]:
        """A tied LM head ``x @ W^T`` (``w``: W [N, K] as stored): MatMulNBits; when embedding Gathers read W too,
        its codes and scales serve them (GatherBlockQuantized), or the head gets a copy and says why."""
        bits, self.bits = self.bits, self.head_bits
        symmetric, self.symmetric = self.symmetric, self.head_symmetric
        try:
            if not embeddings:
                return self._linear(node, node.input[0], w.T, None, node.output[0])
            why = self._unshareable(table, tensor, w)
            if why is not None:
                self.tied += 1
                self.tied_why = why
                return self._linear(node, node.input[0], w.T, None, node.output[0])
            return self._linear(node, node.input[0], w.T, None, node.output[0], share=table)
        finally:
            self.bits, self.symmetric = bits, symmetric

    def _unshareable(self, table: str, tensor: onnx.TensorProto, w: np.ndarray) -> str | None:
        """Why the embedding Gathers of ``table`` cannot read the head's quantized codes (None: they can)."""
        if tensor.data_type != onnx.TensorProto.FLOAT:
            return "GatherBlockQuantized's scales would be float32 for a float16 table"
        if w.shape[1] % self.block_size:
            return (f"the hidden size {w.shape[1]} is not a multiple of the block size {self.block_size}: "
                    "MatMulNBits pads the last block, GatherBlockQuantized's rows cannot")
        for n in self.model.graph.node:
            if n.op_type == "Gather" and n.input[0] == table:
                axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                if axis not in (0, -2):
                    return f"the Gather {n.name or n.output[0]!r} reads the table on axis {axis}"
        return None

    def _shared_gather(self, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        """An embedding Gather of a table quantized once, as GatherBlockQuantized over the head's tensors (its
        codes reshaped to [vocab, hidden / 2] bytes at 4 bits); None for any other node."""
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or node.input[0] not in self.shared:
            return None
        b, scales, zero_points, bits = self.shared[node.input[0]]
        base = unique_name(self.model, f"{node.name or node.output[0]}_q{bits}")
        self.new_tensors.append(numpy_helper.from_array(np.array([0, -1], np.int64), f"{base}_rows"))
        reshape = helper.make_node("Reshape", [b, f"{base}_rows"], [f"{base}_table"], name=f"{base}_table")
        inputs = [f"{base}_table", node.input[1], scales] + ([zero_points] if zero_points else [])
        gather = helper.make_node("GatherBlockQuantized", inputs, list(node.output), name=base, domain="com.microsoft",
                                  bits=bits, block_size=self.block_size, gather_axis=0, quantize_axis=1)
        return [reshape, gather]

    def _linear(self, node: onnx.NodeProto, a: str, w: np.ndarray, bias: str | None, output: str,
                share: str | None = None) -> list[onnx.NodeProto]:
        """MatMulNBits for ``w`` [K, N] (or a DequantizeLinear at ``--target onnx``); ``share``: the tied table
        whose embedding Gathers will read the same tensors (scales [N, blocks], zero points [N, packed blocks])."""
        k, n = w.shape
        if self.target == "onnx":
            replaced = self._dequantized(node, 1, w.T if node.op_type == "Gemm" and _trans_b(node) else w,
                                         axis=0 if _trans_b(node) else 1)
            return replaced
        channel_weight = self.statistics.get(a)
        if channel_weight is not None and channel_weight.shape != (k,):
            channel_weight = None
        b, scales, zero_points = _matmul_nbits_columns(w, self.block_size, self.symmetric, self.bits, self.method,
                                                       channel_weight)
        base = unique_name(self.source, f"{node.name or node.output[0]}_q{self.bits}")
        names = [f"{base}_B", f"{base}_scales"]
        if share is not None:
            scales = scales.reshape(n, -1)
            zero_points = None if zero_points is None else zero_points.reshape(n, -1)
            self.shared[share] = (names[0], names[1], "" if zero_points is None else f"{base}_zp", self.bits)
        self.new_tensors.extend([numpy_helper.from_array(b, names[0]), numpy_helper.from_array(scales, names[1])])
        inputs = [a, *names]
        if zero_points is not None:
            self.new_tensors.append(numpy_helper.from_array(zero_points, f"{base}_zp"))
            inputs.append(f"{base}_zp")
        out = output if bias is None else f"{base}_out"
        matmul = helper.make_node("MatMulNBits", inputs, [out], name=f"{base}", domain="com.microsoft", K=k, N=n,
                                  bits=self.bits, block_size=self.block_size)
        if self.accuracy_level is not None:
            matmul.attribute.append(helper.make_attribute("accuracy_level", self.accuracy_level))
        nodes = [matmul]
        if bias is not None:
            nodes.append(helper.make_node("Add", [out, bias], [output], name=f"{base}_bias"))
        self.quantized += 1
        self.quantized_nodes.append(node.name or node.output[0])
        return nodes

    def _dequantized(self, node: onnx.NodeProto, index: int, w: np.ndarray, axis: int) -> list[onnx.NodeProto]:
        """Store the weight quantized; a DequantizeLinear feeds the original input ``index``."""
        granularity = self.granularity
        if granularity == "block" and self._opset() < 21:
            # --target ort: MatMulNBits is for MatMul/Gemm; a Conv weight gets a DequantizeLinear, blocked only
            # from opset 21 (before, onnxruntime rejects the model): per output channel instead
            granularity = "channel"
            self.per_channel_fallback += 1
        if granularity == "channel" and node.op_type == "Conv":
            axis = 0
        if granularity == "block":
            # blocks run along the reduction: K of a MatMul weight [K, N] (axis 0), Conv's input channels (1)
            axis = 1 if node.op_type == "Conv" else (1 if _trans_b(node) else 0)
        spec = QuantSpec(self.bits, self.symmetric, granularity, axis, self.block_size, self.method)
        channel_weight = self.statistics.get(node.input[0]) if node.op_type in ("MatMul", "Gemm") else None
        if channel_weight is not None and (granularity != "block" or channel_weight.shape != (w.shape[axis],)):
            channel_weight = None
        qz = quantize(w, spec, channel_weight)
        base = unique_name(self.source, f"{node.input[index]}_q{self.bits}")
        self.new_tensors.extend([_codes(qz.q, self.bits, self.symmetric, f"{base}_q"),
                                  numpy_helper.from_array(qz.scale, f"{base}_scale"),
                                  _codes(qz.zero_point, self.bits, self.symmetric, f"{base}_zp")])
        attrs: dict[str, Any] = {}
        if granularity != "tensor":
            attrs["axis"] = axis
        if granularity == "block":
            attrs["block_size"] = self.block_size
        dq = helper.make_node("DequantizeLinear", [f"{base}_q", f"{base}_scale", f"{base}_zp"], [f"{base}_w"],
                              name=f"{base}_dq", **attrs)
        rewired = onnx.NodeProto()
        rewired.CopyFrom(node)
        rewired.input[index] = f"{base}_w"
        self.quantized += 1
        self.quantized_nodes.append(node.name or node.output[0])
        return [dq, rewired]


#: bytes of float weight quantized at once for MatMulNBits (its columns are independent): the temporaries of the
#: numerics stay a few times this, whatever the weight's size
COLUMN_CHUNK_BYTES = 16 << 20


def _matmul_nbits_columns(w: np.ndarray, block_size: int, symmetric: bool, bits: int, method: str = "rtn",
                          channel_weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`matmul_nbits` of ``w`` [K, N], a slice of columns at a time (the same bytes: every output column is
    quantized on its own)."""
    k, n = w.shape
    step = max(1, COLUMN_CHUNK_BYTES // max(1, 4 * k))
    if step >= n:
        b, scales, zero_points, _ = matmul_nbits(w, block_size, symmetric, bits, method, channel_weight)
        return b, scales, zero_points
    parts = [matmul_nbits(w[:, start:start + step], block_size, symmetric, bits, method, channel_weight)[:3]
             for start in range(0, n, step)]
    zero_points = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])  # type: ignore[misc]
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), zero_points)


def _activation_statistics(model: onnx.ModelProto, calibration: Any) -> dict[str, np.ndarray]:
    """Each linear op's input activation -> the sum of its squares per channel (activations.py) on the calibration
    inputs: ``calibration`` (.npz file or folder), else generated ones (a decoder with a KV cache: a prefill of
    128 random tokens, no past, as ``gsrewrite bench`` times it; others: 4 of validation's sample sets). {} when the
    model cannot be run so (logged): the search then weights each element by its own magnitude."""
    from gsrewrite_builtins.compression.activations import channel_statistics

    try:
        if calibration:
            from gsrewrite_builtins.compression.int8_quantizers import _calibration_feeds

            feeds = list(_calibration_feeds(model, calibration, 0))
        else:
            from gsrewrite.plugin_api import decoder_phases, generated_inputs

            phases = decoder_phases(model)
            feeds = [phases[1].feed] if phases else generated_inputs(model, 4)
        return channel_statistics(model, feeds)
    except UsageError:
        raise
    except Exception as exc:  # the probe's failure (a model onnxruntime cannot run so): the plain search
        log.warning("activation statistics unavailable, the scale search weights elements by magnitude: %s",
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return {}


def _nothing_quantized(model: onnx.ModelProto, op_types: list[str], min_elements: int) -> str:
    """Why no weight was quantized: which ops read the model's weights instead."""
    inits = initializer_map(model.graph)
    readers: dict[str, int] = {}
    for node in model.graph.node:
        if any(name in inits and math.prod(inits[name].dims) >= min_elements for name in node.input):
            readers[node.op_type] = readers.get(node.op_type, 0) + 1
    wanted = f"no {'/'.join(op_types)} weight of {min_elements} elements or more to quantize"
    if not readers:
        return f"{wanted} (smaller weights stay float: min_elements)"
    return f"{wanted}; the model's weights feed " + ", ".join(f"{op} {n}" for op, n in sorted(readers.items()))


def _perm(node: onnx.NodeProto) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _trans_b(node: onnx.NodeProto) -> bool:
    return node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)


def _codes(values: np.ndarray, bits: int, symmetric: bool, name: str) -> onnx.TensorProto:
    """Codes as an ONNX tensor: int8/uint8, or int4/uint4 packed two per byte."""
    if bits == 8:
        return numpy_helper.from_array(values.astype(np.int8 if symmetric else np.uint8), name)
    elem = onnx.TensorProto.INT4 if symmetric else onnx.TensorProto.UINT4
    tensor = onnx.TensorProto()
    tensor.name = name
    tensor.data_type = elem
    tensor.dims.extend(values.shape)
    tensor.raw_data = pack_int4(values).tobytes()
    return tensor


def register(registry: Any, strategies: Iterable[Any]) -> None:
    for strategy in strategies:
        registry.add(strategy)
