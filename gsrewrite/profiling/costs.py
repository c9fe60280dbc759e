"""Per-node cost of a model: MACs (through the ``gsrewrite_profile_op`` profilers), parameters, weight bytes,
activation bytes and weight sparsity, with totals and per-op-type sums.

Shapes come from :func:`gsrewrite.shapes.walk.infer_symbolic`: with dynamic inputs every count is an
expression in the input dims (a polynomial in ``seq``), and :meth:`Profile.bind` evaluates it at given sizes.

* ``params``: elements of the node's constant inputs (initializers and ``Constant`` outputs); the total counts
  each constant once however many nodes read it.
* ``weight_bytes``: the same in bytes (4-bit types count half a byte per element).
* ``activation_bytes``: bytes of the node's outputs.
* sparsity: the fraction of zero elements of the node's weights (constants of at least
  :data:`SPARSITY_MIN_ELEMENTS` elements), and the fraction of all-zero blocks of :data:`BLOCK` consecutive
  elements along the last axis (structured sparsity a kernel could skip).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import heapq
import logging
import math
import mmap
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper
from onnx_graphsurgeon.ir.tensor import LazyValues

from gsrewrite import plugin_hooks
from gsrewrite.model_io.graph_walk import node_subgraphs
from gsrewrite.model_io.weightless import external_range
from gsrewrite.profiling import subgraphs
from gsrewrite.shapes import symdim
from gsrewrite.shapes import values as shape_values
from gsrewrite.shapes.rules import Info
from gsrewrite.shapes.symdim import DimValue, Expr
from gsrewrite.shapes.walk import InputShapes, SymbolicShapes, infer_symbolic, value_info
from gsrewrite.stages import stage

log = logging.getLogger(__name__)

SPARSITY_MIN_ELEMENTS = 16
_STANDARD_DOMAINS = ("", "ai.onnx")
BLOCK = 4
#: bits per element of the types numpy has no size for
_SUB_BYTE_BITS: dict[int, int] = {int(onnx.TensorProto.INT4): 4, int(onnx.TensorProto.UINT4): 4}
_FLOAT4 = getattr(onnx.TensorProto, "FLOAT4E2M1", None)
if _FLOAT4 is not None:
    _SUB_BYTE_BITS[int(_FLOAT4)] = 4

Count = DimValue | None


@functools.lru_cache(maxsize=64)
def item_bits(elem_type: int) -> int:
    if elem_type in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[elem_type]
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize) * 8
    except (KeyError, TypeError, ValueError):
        return 0


@dataclass
class WeightStats:
    elements: int
    zeros: int
    blocks: int
    zero_blocks: int

    def add(self, other: WeightStats) -> None:
        self.elements += other.elements
        self.zeros += other.zeros
        self.blocks += other.blocks
        self.zero_blocks += other.zero_blocks

    @property
    def sparsity(self) -> float | None:
        return self.zeros / self.elements if self.elements else None

    @property
    def block_sparsity(self) -> float | None:
        return self.zero_blocks / self.blocks if self.blocks else None


@dataclass(slots=True)
class NodeCost:
    name: str
    op_type: str
    domain: str
    macs: Count
    params: int
    weight_bytes: int
    activation_bytes: Count
    weights: WeightStats | None = None
    profiled: bool = True

    @property
    def op_key(self) -> str:
        return self.op_type if self.domain in ("", "ai.onnx") else f"{self.domain}.{self.op_type}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op_type": self.op_key, "macs": count_json(self.macs), "params": self.params,
                "weight_bytes": self.weight_bytes, "activation_bytes": count_json(self.activation_bytes),
                "sparsity": None if self.weights is None else self.weights.sparsity,
                "block_sparsity": None if self.weights is None else self.weights.block_sparsity}


def count_json(value: Count) -> int | str | None:
    return value if value is None or isinstance(value, int) else str(value)


def add_counts(a: Count, b: Count) -> Count:
    if a is None or b is None:
        return a if b is None else b
    try:
        return symdim.add(a, b)
    except symdim.ExpressionTooLarge:
        return None


class CountSum:
    """A sum of counts (unknown ones skipped): ints are added as ints and each distinct expression is counted, so
    the polynomial arithmetic happens once per distinct expression when :meth:`total` is asked, not once per
    node (a sum over a model's nodes is linear in their number, whatever the expressions)."""

    __slots__ = ("_exprs", "_int")

    def __init__(self) -> None:
        self._int = 0
        self._exprs: dict[Expr, int] = {}

    @staticmethod
    def joined(sums: Iterable[CountSum]) -> CountSum:
        """One sum of the counts of ``sums``."""
        joined = CountSum()
        for other in sums:
            joined._int += other._int
            for expr, times in other._exprs.items():
                joined._exprs[expr] = joined._exprs.get(expr, 0) + times
        return joined

    def add(self, value: Count) -> None:
        if type(value) is int:  # (the most common count first)
            self._int += value
        elif isinstance(value, Expr):
            self._exprs[value] = self._exprs.get(value, 0) + 1
        elif value is not None:
            self._int += int(value)

    def symbols(self) -> set[str]:
        """The symbols of the expressions added."""
        return set().union(*(expr.symbols() for expr in self._exprs))

    def total(self) -> Count:
        """The sum; None when it is too large an expression."""
        total: DimValue = self._int
        try:
            for expr, times in self._exprs.items():
                total = symdim.add(total, symdim.mul(expr, times))
        except symdim.ExpressionTooLarge:
            return None
        return total


@dataclass
class OpTypeTotal:
    count: int = 0
    macs: Count = 0
    params: int = 0
    weight_bytes: int = 0
    activation_bytes: Count = 0
    unknown_macs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "macs": count_json(self.macs), "params": self.params,
                "weight_bytes": self.weight_bytes, "activation_bytes": count_json(self.activation_bytes),
                "nodes_without_macs": self.unknown_macs}


@dataclass
class Profile:
    nodes: list[NodeCost]
    shapes: SymbolicShapes
    params: int = 0
    weight_bytes: int = 0
    weights: WeightStats = field(default_factory=lambda: WeightStats(0, 0, 0, 0))
    bindings: dict[str, int] = field(default_factory=dict)

    @functools.cached_property
    def _sums(self) -> dict[str, tuple[OpTypeTotal, CountSum, CountSum]]:
        """Per op type (in model order): its totals, and the sums of its nodes' MACs and activation bytes (one
        pass over the nodes: every total is derived from these)."""
        sums: dict[str, tuple[OpTypeTotal, CountSum, CountSum]] = {}
        for node in self.nodes:
            key = node.op_key
            found = sums.get(key)
            if found is None:
                found = sums[key] = (OpTypeTotal(), CountSum(), CountSum())
            entry, macs, activation = found
            entry.count += 1
            if node.macs is None:
                entry.unknown_macs += 1
            macs.add(node.macs)
            entry.params += node.params
            entry.weight_bytes += node.weight_bytes
            activation.add(node.activation_bytes)
        for entry, macs, activation in sums.values():
            entry.macs, entry.activation_bytes = macs.total(), activation.total()
        return sums

    @functools.cached_property
    def macs(self) -> Count:
        """The nodes' MACs summed (those whose MACs are unknown are left out: :attr:`unprofiled` lists them)."""
        return CountSum.joined(macs for _, macs, _ in self._sums.values()).total()

    @functools.cached_property
    def activation_bytes(self) -> Count:
        return CountSum.joined(activation for _, _, activation in self._sums.values()).total()

    @property
    def unprofiled(self) -> dict[str, int]:
        """op type -> nodes whose MACs are unknown (no profiler knows the op, or a shape it needs is unknown)."""
        out: dict[str, int] = {}
        for node in self.nodes:
            if node.macs is None:
                out[node.op_key] = out.get(node.op_key, 0) + 1
        return out

    def by_op_type(self) -> dict[str, OpTypeTotal]:
        """Totals per op type, most MACs first."""
        totals = [(key, dataclasses.replace(entry)) for key, (entry, _, _) in self._sums.items()]
        return dict(sorted(totals, key=lambda kv: -_rank_value(kv[1].macs)))

    def symbols(self) -> list[str]:
        """The symbols the nodes' counts are expressions in."""
        names: set[str] = set()
        for _, macs, activation in self._sums.values():
            names |= macs.symbols() | activation.symbols()
        return sorted(names)

    def unknown_symbols(self) -> list[str]:
        """The symbols of :meth:`symbols` no model input gives (ONNX's ``unk__N``, a size only the data decides):
        counts in them are not known before the model runs."""
        return [name for name in self.symbols() if name not in self.shapes.input_symbols]

    def bind(self, bindings: Mapping[str, int]) -> Profile:
        """The profile with its symbols bound to sizes (symbols not bound stay symbolic)."""
        def value(count: Count) -> Count:
            if count is None or isinstance(count, int):
                return count
            try:
                return symdim.evaluate(count, bindings)
            except KeyError:
                return count
        nodes = [NodeCost(n.name, n.op_type, n.domain, value(n.macs), n.params, n.weight_bytes,
                          value(n.activation_bytes), n.weights, n.profiled) for n in self.nodes]
        return Profile(nodes, self.shapes, self.params, self.weight_bytes, self.weights,
                       {**self.bindings, **bindings})

    def top(self, n: int) -> list[NodeCost]:
        """The ``n`` nodes of most MACs (in model order among equals)."""
        return heapq.nlargest(n, self.nodes, key=lambda c: _rank_value(c.macs))

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        nodes = self.top(top) if top else self.nodes
        return {
            "total": {"macs": count_json(self.macs), "flops": count_json(_times(self.macs, 2)),
                      "params": self.params, "weight_bytes": self.weight_bytes,
                      "activation_bytes": count_json(self.activation_bytes),
                      "sparsity": self.weights.sparsity, "block_sparsity": self.weights.block_sparsity},
            "symbols": self.symbols(),
            "unknown_symbols": self.unknown_symbols(),
            "bindings": dict(self.bindings),
            "unprofiled": self.unprofiled,
            "by_op_type": {k: v.to_dict() for k, v in self.by_op_type().items()},
            "nodes": [n.to_dict() for n in nodes],
        }


def _times(count: Count, factor: int) -> Count:
    return None if count is None else symdim.mul(count, factor)


#: size every symbol takes when symbolic counts are ranked (ordering only; never reported)
_RANK_SIZE = 128


@functools.lru_cache(maxsize=4096)
def _rank_value(count: Count) -> float:
    if count is None:
        return -1.0
    if isinstance(count, int):
        return float(count)
    try:
        return float(symdim.evaluate(count, dict.fromkeys(count.symbols(), _RANK_SIZE)))
    except (KeyError, ZeroDivisionError):
        return 0.0


@dataclass
class ProfileContext:
    """What a profiler may ask besides the node: opsets and the values of small constants."""

    opsets: dict[str, int]
    shapes: SymbolicShapes
    #: the model's folder (external tensors are read from there for their sparsity)
    base_dir: str | None = None
    #: the model profiled, its constants (name -> tensor) and how deep in subgraphs it is
    model: onnx.ModelProto | None = None
    constants: Mapping[str, onnx.TensorProto] = field(default_factory=dict)
    depth: int = 0
    #: whether weights are read for their sparsity (subgraphs are profiled the same way)
    sparsity: bool = True
    _producers: dict[str, onnx.NodeProto] | None = field(default=None, repr=False)

    @property
    def producers(self) -> dict[str, onnx.NodeProto]:
        """Tensor -> the node producing it (main graph); mapped when a profiler first asks (few do: a map of
        every tensor is most of a profile's memory on a graph of a million nodes)."""
        if self._producers is None:
            graph = self.model.graph if self.model is not None else onnx.GraphProto()
            self._producers = {out: node for node in graph.node for out in node.output if out}
        return self._producers

    def node_proto(self, node: gs.Node) -> onnx.NodeProto | None:
        """The ONNX node behind a profiler's graphsurgeon view (subgraphs are in its attributes)."""
        for tensor in node.outputs:
            found = self.producers.get(tensor.name)
            if found is not None:
                return found
        return None

    def value_info(self, name: str, drop_axis: int | None = None) -> onnx.ValueInfoProto | None:
        """``name``'s inferred type (symbolic dims as ``dim_param`` expressions), without ``drop_axis``."""
        info = value_info(self.shapes, name)
        if info is not None and drop_axis is not None:
            dims = info.type.tensor_type.shape.dim
            if not -len(dims) <= drop_axis < len(dims):
                return None
            del dims[drop_axis % len(dims)]
        return info

    def subgraph_profile(self, node: gs.Node, attribute: str,
                         formal: list[onnx.ValueInfoProto | None] | None = None) -> Profile | None:
        """The profile of ``node``'s subgraph ``attribute`` (see :mod:`gsrewrite.profiling.subgraphs`); None
        past :data:`~gsrewrite.profiling.subgraphs.MAX_DEPTH` or when there is no such subgraph."""
        proto = self.node_proto(node)
        if proto is None or self.model is None or self.depth >= subgraphs.MAX_DEPTH:
            return None
        graph = next((g for name, g in node_subgraphs(proto) if name == attribute), None)
        if graph is None:
            return None
        sub = subgraphs.subgraph_model(graph, self.model, self.shapes, self.constants, formal or [])
        return profile_model(sub, base_dir=self.base_dir, depth=self.depth + 1, sparsity=self.sparsity)

    def producer_op(self, name: str) -> str | None:
        """The op type of the node that produces ``name`` (``None`` for inputs and constants)."""
        node = self.producers.get(name)
        return None if node is None else node.op_type

    def producer_input_count(self, name: str) -> int:
        """How many inputs (not omitted) the producer of ``name`` has (0 without a producer)."""
        node = self.producers.get(name)
        return 0 if node is None else sum(1 for i in node.input if i)

    def opset(self, domain: str = "") -> int | None:
        return self.opsets.get("" if domain == "ai.onnx" else domain)

    def value(self, name: str) -> Any:
        info = self.shapes.tensors.get(name)
        if info is None:
            return None
        if info.floats is not None:
            return info.floats
        return shape_values.plain(info.value) if info.has_value else None


def profile_model(model: onnx.ModelProto, input_shapes: InputShapes | None = None,
                  shapes: SymbolicShapes | None = None, base_dir: str | None = None, depth: int = 0,
                  sparsity: bool = True) -> Profile:
    """The cost of every main-graph node of ``model`` (see the module docstring). ``base_dir``: the model's
    folder, where external (or weightless-loaded) tensors are read from for their sparsity (in chunks);
    without it their sparsity is not computed. Local functions are inlined first (their nodes are profiled);
    ``If``/``Loop``/``Scan`` bodies are profiled by the control-flow profiler (``depth``: how deep in them).
    ``sparsity=False``: no weight is read (MACs and sizes only, as ``info`` shows them)."""
    if shapes is None:
        model = subgraphs.inline_functions(model)
    graph = model.graph
    constants: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in _STANDARD_DOMAINS:
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    constants[node.output[0]] = attr.t
    stats = _SparsityJobs(base_dir, sparsity)
    timed = stage if depth == 0 else contextlib.nullcontext  # stages of the model, not of each subgraph
    try:
        stats.start(constants, (name for node in graph.node for name in node.input if name in constants))
        if shapes is None:
            with timed("inferring shapes"):  # while the weights are scanned
                shapes = infer_symbolic(model, input_shapes)
        context = ProfileContext({("" if o.domain == "ai.onnx" else o.domain): o.version
                                  for o in model.opset_import}, shapes, base_dir=base_dir, model=model,
                                 constants=constants, depth=depth, sparsity=sparsity)
        costing = _NodeCosts(shapes, constants, context, plugin_hooks.op_profiler())
        nodes: list[NodeCost] = []
        weighted: list[tuple[NodeCost, list[str]]] = []  # the nodes reading constants, and those they read
        used: set[str] = set()  # the constants the model reads or holds
        with timed("counting"):
            for node in graph.node:
                if node.op_type == "Constant" and node.domain in _STANDARD_DOMAINS:
                    used.update(name for name in node.output if name in constants)
                    continue
                cost, read = costing(node)
                nodes.append(cost)
                if read:
                    weighted.append((cost, read))
                    used.update(read)
        # the sparsity last: the scans ran beside the walk, which never waits for them
        with timed("reading weights for sparsity") if sparsity else contextlib.nullcontext():
            for cost, read in weighted:
                for name in read:
                    found = stats.result(name, constants[name])
                    if found is not None:
                        cost.weights = WeightStats(0, 0, 0, 0) if cost.weights is None else cost.weights
                        cost.weights.add(found)
        profile = Profile(nodes, shapes, bindings=dict(shapes.bindings))
        for name in used:
            tensor = constants[name]
            elements = math.prod(tensor.dims)
            profile.params += elements
            profile.weight_bytes += (elements * item_bits(tensor.data_type) + 7) // 8
            weight = stats.result(name, tensor)
            if weight is not None:
                profile.weights.add(weight)
    finally:
        stats.close()
    return profile


#: weights of fewer bytes in all are scanned on the calling thread when asked (a thread pool, its handoffs and a
#: future per weight cost a small model more than its scan)
_THREADED_BYTES = 16 << 20


class _SparsityJobs:
    """The sparsity of the weights, computed on worker threads while the nodes are walked (numpy scans the
    arrays without the GIL: reading the weights was most of a profile's time, benchmarks/results/code_figures.md).
    Each worker
    scans one run of weights in file order; a model with little to scan is scanned on the calling thread."""

    def __init__(self, base_dir: str | None, enabled: bool = True) -> None:
        self._base_dir = base_dir
        self._enabled = enabled
        self._files = _MappedFiles()
        self._done: dict[str, WeightStats | None] = {}
        self._batches: dict[str, Future[dict[str, WeightStats | None]]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def start(self, constants: Mapping[str, onnx.TensorProto], names: Iterable[str]) -> None:
        """Start the weights among ``names`` (in the order the walk will need them) that are large enough."""
        if not self._enabled or not constants:
            return
        todo: dict[str, onnx.TensorProto] = {}
        for name in names:
            tensor = constants[name]
            if name not in todo and math.prod(tensor.dims) >= SPARSITY_MIN_ELEMENTS:
                todo[name] = tensor
        sizes = {name: math.prod(t.dims) * item_bits(t.data_type) // 8 for name, t in todo.items()}
        total = sum(sizes.values())
        if total < _THREADED_BYTES:
            return
        workers = min(4, os.cpu_count() or 1)
        batches: list[list[tuple[str, onnx.TensorProto]]] = [[]]
        done = 0
        for name, tensor in todo.items():  # runs of about total / workers bytes each
            if done >= total * len(batches) / workers and len(batches) < workers:
                batches.append([])
            batches[-1].append((name, tensor))
            done += sizes[name]
        self._pool = ThreadPoolExecutor(max_workers=len(batches), thread_name_prefix="gsrewrite-sparsity")
        for batch in batches:
            job = self._pool.submit(self._scan, batch)
            self._batches.update((name, job) for name, _ in batch)

    def _scan(self, batch: list[tuple[str, onnx.TensorProto]]) -> dict[str, WeightStats | None]:
        return {name: _weight_stats(tensor, self._base_dir, self._files) for name, tensor in batch}

    def result(self, name: str, tensor: onnx.TensorProto) -> WeightStats | None:
        if not self._enabled:
            return None
        if name not in self._done:  # a weight not started (on a small model, any) is scanned here, once
            job = self._batches.get(name)
            self._done[name] = job.result()[name] if job is not None else \
                _weight_stats(tensor, self._base_dir, self._files)
        return self._done[name]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._files.close()


class _NodeCosts:
    """The cost of one node at a time, for the walk of :func:`profile_model`: the profiler's MACs, the constant
    inputs' elements and bytes, the outputs' bytes. Each call builds only that node's light graphsurgeon view
    (nothing of it is kept: a view of every tensor was most of a profile's memory on a graph of a million nodes);
    the bytes of an output are computed once per distinct shape and type."""

    def __init__(self, shapes: SymbolicShapes, constants: Mapping[str, onnx.TensorProto], context: ProfileContext,
                 profiler: Callable[[gs.Node, Any], Any]) -> None:
        self._shapes, self._constants, self._context, self._profiler = shapes, constants, context, profiler
        self._constant_views: dict[str, gs.Constant] = {}
        self._bytes: dict[tuple[Any, int], Count] = {}

    def __call__(self, node: onnx.NodeProto) -> tuple[NodeCost, list[str]]:
        """The node's cost, and the constants it reads (in input order)."""
        constants, tensors = self._constants, self._shapes.tensors
        inputs: list[gs.Tensor] = []
        read: list[str] = []
        params = weight_bytes = 0
        for name in node.input:
            if not name:
                inputs.append(_light_variable("", None, None))
            elif name in constants:
                tensor = constants[name]
                view = self._constant_views.get(name)
                if view is None:
                    view = self._constant_views[name] = _light_constant(name, tensor)
                inputs.append(view)
                read.append(name)
                elements = math.prod(tensor.dims)
                params += elements
                weight_bytes += (elements * item_bits(tensor.data_type) + 7) // 8
            else:
                inputs.append(_variable(name, tensors.get(name)))
        output_names = list(node.output)
        outputs = [_variable(name, tensors.get(name)) if name else _light_variable("", None, None)
                   for name in output_names]
        name, op_type, domain = node.name, sys.intern(node.op_type), node.domain
        try:
            answer = self._profiler(_light_node(node, name, op_type, domain, inputs, outputs), self._context)
        except Exception as exc:  # an expression past its bounds (hostile shape arithmetic): unknown, not an error
            if not isinstance(exc.__cause__ or exc.__context__, symdim.ExpressionTooLarge) and \
                    not isinstance(exc, symdim.ExpressionTooLarge):
                raise
            answer = None
        macs = None if answer is None else answer.macs
        if macs is not None and not isinstance(macs, (int, symdim.Expr)):
            macs = int(macs)
        sizes = [self._output_bytes(tensors.get(output)) for output in output_names if output]
        activation: Count = sizes[0] if len(sizes) == 1 else 0
        if len(sizes) > 1:
            for size in sizes:
                activation = None if size is None else add_counts(activation, size)
                if activation is None:
                    break
        return NodeCost(name, op_type, domain, macs, params, weight_bytes, activation, None, answer is not None), read

    def _output_bytes(self, info: Info | None) -> Count:
        if info is None or info.shape is None:
            return None
        key = (tuple(info.shape), info.dtype)
        if key not in self._bytes:
            bits = item_bits(info.dtype)
            try:
                size = _product(info.shape) if bits else None
                self._bytes[key] = None if size is None else _bytes_of(size, bits)
            except symdim.ExpressionTooLarge:
                self._bytes[key] = None
        return self._bytes[key]


def _bytes_of(elements: DimValue, bits: int) -> DimValue:
    """Bytes of ``elements`` items of ``bits`` each, rounded up (whole-byte types need no division)."""
    if bits % 8 == 0:
        return symdim.mul(elements, bits // 8)
    return symdim.floor_div(symdim.mul(elements, bits) + 7, 8)


def _product(shape: list[Any]) -> Count:
    total: DimValue = 1
    for d in shape:
        if d is None:
            return None
        total = symdim.mul(total, d)
    return total


def _light_node(node: onnx.NodeProto, name: str, op_type: str, domain: str, inputs: list[gs.Tensor],
                outputs: list[gs.Tensor]) -> gs.Node:
    """A graphsurgeon node as profilers read it (op, name, domain, attrs, inputs, outputs), without the
    producer/consumer links a graph needs (building those was most of the profile's time). The fields are
    set directly: graphsurgeon's ``__setattr__`` (which syncs those links) costs more than the profiler."""
    view = gs.Node.__new__(gs.Node)
    fields = view.__dict__
    fields["op"], fields["name"], fields["domain"] = op_type, name, domain or None
    attributes = node.attribute
    fields["attrs"] = {a.name: _attr(a) for a in attributes} if attributes else {}
    fields["inputs"], fields["outputs"] = inputs, outputs
    return view


def _variable(name: str, info: Info | None) -> gs.Tensor:
    """The view of a tensor whose inferred type is ``info``."""
    dtype_code = info.dtype if info is not None else 0
    dtype = _NP_DTYPES.get(dtype_code)
    if dtype is None and dtype_code:
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype_code)
        except (KeyError, TypeError, ValueError):
            dtype = None
    return _light_variable(name, dtype, None if info is None or info.shape is None else list(info.shape))


def _light_constant(name: str, tensor: onnx.TensorProto) -> gs.Constant:
    """``gs.Constant(name, LazyValues(tensor))`` with the fields their ``__init__`` set, without the links (and
    the per-call import ``LazyValues.__init__`` does)."""
    dtype, itemsize = _lazy_type(tensor.data_type)
    lazy = LazyValues.__new__(LazyValues)
    lazy.__dict__.update(tensor=tensor, shape=tensor.dims, dtype=dtype, nbytes=math.prod(tensor.dims) * itemsize)
    constant = gs.Constant.__new__(gs.Constant)
    constant.__dict__.update(name=name, inputs=[], outputs=[], _values=lazy, data_location=None,
                             _export_dtype=None)
    return constant


@functools.lru_cache(maxsize=64)
def _lazy_type(data_type: int) -> tuple[Any, int]:
    """(dtype, itemsize) as ``LazyValues`` computes them for a tensor of ``data_type``."""
    probe = LazyValues(onnx.TensorProto(data_type=data_type, dims=[1]))
    return probe.dtype, int(probe.nbytes)


def _light_variable(name: str, dtype: Any, shape: list[Any] | None) -> gs.Variable:
    """A ``gs.Variable`` with the fields its ``__init__`` sets, without the producer/consumer links."""
    variable = gs.Variable.__new__(gs.Variable)
    fields = variable.__dict__
    fields["name"], fields["inputs"], fields["outputs"] = name, [], []
    fields["dtype"], fields["type"], fields["shape"] = dtype, "tensor_type", shape
    return variable


_NP_DTYPES: dict[int, Any] = {code: onnx.helper.tensor_dtype_to_np_dtype(code) for code in (
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT64,
    onnx.TensorProto.INT32, onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.BOOL)}


def _attr(attr: onnx.AttributeProto) -> Any:
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return None
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _weight_stats(tensor: onnx.TensorProto, base_dir: str | None, files: _MappedFiles) -> WeightStats | None:
    elements = math.prod(tensor.dims)
    if elements < SPARSITY_MIN_ELEMENTS:
        return None
    last = tensor.dims[-1] if tensor.dims else 1
    try:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            if base_dir is None:
                return None
            found = external_range(tensor, base_dir)
            if found is None:
                return None
            path, offset, length, dtype = found
            if not _countable(dtype) or length != elements * dtype.itemsize:
                return None
            return _zero_stats(_chunks(files.view(path, offset, elements, dtype)), elements, last)
        array = numpy_helper.to_array(tensor)
    except Exception:  # an unreadable or exotic type, a file shorter than its tensors: no sparsity, not an error
        return None
    if not _countable(array.dtype):
        return None
    return _zero_stats(_chunks(array.reshape(-1)), elements, last)


#: the scan counts a weight this many items at a time: each chunk is one GIL-free numpy call over the mapped
#: file, few returns to the GIL), and the boolean buffer it fills stays in cache
_CHUNK_ELEMENTS = 1 << 21


def _countable(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in "fiub" or dtype.itemsize in (1, 2)


class _MappedFiles:
    """Weight files mapped read-only, once each (the threads share a mapping; nothing is copied out of the
    page cache). A file is mapped at its size when first read, and every range is checked against that size."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap | None] = {}
        self._lock = threading.Lock()

    def view(self, path: str, offset: int, count: int, dtype: np.dtype[Any]) -> np.ndarray:
        with self._lock:
            if path not in self._maps:
                with open(path, "rb") as f:
                    try:
                        self._maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    except (OSError, ValueError):  # a file system that cannot map it: each range is read
                        self._maps[path] = None
            found = self._maps[path]
        if found is None:
            values = np.fromfile(path, dtype=dtype, count=count, offset=offset)
            if values.size != count:
                raise ValueError("the weight file is shorter than its tensors say")
            return values
        if offset < 0 or offset + count * dtype.itemsize > len(found):
            raise ValueError("the weight file is shorter than its tensors say")
        return np.ndarray((count,), dtype=dtype, buffer=found, offset=offset)

    def close(self) -> None:
        with self._lock:
            for mapped in self._maps.values():
                if mapped is not None:
                    with contextlib.suppress(BufferError):  # a view still alive: it closes when the view goes
                        mapped.close()
            self._maps.clear()


_LOCAL = threading.local()


def _zeros_buffer() -> np.ndarray:
    """This thread's boolean buffer, one item per item of a chunk."""
    found = getattr(_LOCAL, "zeros", None)
    if found is None or found.size < _CHUNK_ELEMENTS:
        found = _LOCAL.zeros = np.empty(_CHUNK_ELEMENTS, dtype=bool)
    return found  # type: ignore[no-any-return]


def _chunks(values: np.ndarray) -> Iterator[np.ndarray]:
    step = _CHUNK_ELEMENTS
    return (values[i:i + step] for i in range(0, values.size, step))


def _zero_stats(chunks: Iterable[np.ndarray], elements: int, last: int) -> WeightStats:
    """Zeros and all-zero blocks of BLOCK consecutive items (when rows split into blocks) over the chunks."""
    blocked = last % BLOCK == 0
    zeros = zero_blocks = 0
    own = _zeros_buffer()
    for chunk in chunks:
        zero = own[:chunk.size]
        np.equal(chunk, 0, out=zero)
        found = int(np.count_nonzero(zero))
        if found and blocked:
            # four booleans are four bytes: a block is all zero when they read as 0x01010101
            zero_blocks += int(np.count_nonzero(zero.view(np.uint32) == 0x01010101))
        zeros += found
    return WeightStats(elements, zeros, elements // BLOCK if blocked else 0, zero_blocks)
