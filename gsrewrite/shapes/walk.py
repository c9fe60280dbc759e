"""Symbolic shape inference: every tensor's dims as expressions in the input dims (``batch``, ``seq``,
``seq*2``, ``(h - 3)//2 + 1``), for the ``shapes``, ``profile``, ``memory`` and ``compute-graph`` commands.

One walk over the main graph in topological order applies :mod:`gsrewrite.shapes.rules` to the standard
ops (tracking the values of the small integer tensors exporters compute shapes with: ``Shape -> Gather ->
Concat -> Reshape`` gives ``[batch, seq, 12, 64]``, not four unknowns) and asks the ``gsrewrite_infer_shape``
plugin handlers about custom-domain ops, with symbolic dims in the shapes they get. Where neither knows an
output (an op without a rule, a control-flow op), the answer of ONNX's own inference (run once first, through
:func:`gsrewrite.shapes.handlers.onnx_and_handlers`) is used, its unnamed dims becoming fresh
symbols. A dim ONNX knows statically wins over an expression (from the first walk on when the model given is ONNX's
inference: ``onnx_dims``). An output a rule found only by assuming something of the sizes (see
:mod:`gsrewrite.shapes.rules`), and whatever is computed from it, is marked not exact (``Info.exact``).

Input dims come from the model (``dim_param`` names become symbols, unnamed or ``-1`` dims get a fresh
``INPUT_AXIS`` symbol) or from the caller (:mod:`gsrewrite.shapes.input_shapes`: ``ids:2,seq`` sets an input's
dims, ``seq=128`` binds a symbol everywhere; a name the model does not have is an error).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import math
import operator
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper

from gsrewrite import plugin_hooks
from gsrewrite.shapes import symdim
from gsrewrite.shapes.handlers import STANDARD_DOMAINS, ShapeContext
from gsrewrite.shapes.handlers import onnx_and_handlers as infer_types
from gsrewrite.shapes.input_shapes import InputShapes, check_declared, check_names, model_symbols
from gsrewrite.shapes.input_shapes import parse_input_shapes as parse_input_shapes  # callers' old import path
from gsrewrite.shapes.rules import MAX_VALUE_LENGTH, RULES, Dim, Info, NodeView, Shape, constant_value
from gsrewrite.shapes.symdim import DimValue, Expr
from gsrewrite.shapes.values import assumptions_made, start_assumptions

log = logging.getLogger(__name__)

#: initializers up to this many elements are read (values of shape arithmetic, Resize scales)
SMALL_CONSTANT = MAX_VALUE_LENGTH


@dataclass
class WalkCounts:
    """Model walks made in this process (a model's If/Loop/Scan bodies are part of its walk)."""

    walks: int = 0


COUNTS = WalkCounts()


@dataclass
class SymbolicShapes:
    """The result: what is known of every tensor of the main graph."""

    tensors: dict[str, Info]
    #: symbol -> where it comes from (``input_ids[1]``; for a dim only ONNX's inference named, the tensor and axis)
    symbols: dict[str, str] = field(default_factory=dict)
    #: symbols bound to values by the caller (``seq=128``)
    bindings: dict[str, int] = field(default_factory=dict)
    #: tensors whose shape is not known: the rank, or a dim that is unknown or in a symbol no input gives (see
    #: :attr:`input_symbols`)
    unknown: list[str] = field(default_factory=list)
    #: nodes whose outputs came from ONNX's inference, not a rule or handler
    fallback_ops: dict[str, int] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    #: the symbols the graph inputs' dims define (and the input shapes given): a dim in any other symbol (ONNX's
    #: ``unk__N``, a size only the data decides such as NonZero's count) is not known before the model runs
    input_symbols: set[str] = field(default_factory=set)
    #: each If/Loop/Scan body walked, with what is known of its tensors (and of the enclosing graphs' it reads);
    #: a Loop's body is walked twice (the second walk, with what changes between iterations, comes last)
    bodies: list[tuple[onnx.GraphProto, Mapping[str, Info]]] = field(default_factory=list)

    def unknown_symbols(self) -> list[str]:
        """The symbols used that no input gives (see :attr:`input_symbols`)."""
        return sorted(set(self.symbols) - self.input_symbols)

    def shape(self, name: str) -> Shape | None:
        info = self.tensors.get(name)
        return None if info is None or info.shape is None else list(info.shape)

    def dtype(self, name: str) -> int:
        info = self.tensors.get(name)
        return 0 if info is None else info.dtype

    def concrete(self, name: str, bindings: Mapping[str, int]) -> tuple[int, ...] | None:
        """The shape of ``name`` with the symbols bound (``None`` when a dim is unknown or unbound)."""
        shape = self.shape(name)
        if shape is None or any(d is None for d in shape):
            return None
        try:
            return tuple(symdim.evaluate(d, {**self.bindings, **bindings}) for d in shape if d is not None)
        except KeyError:
            return None

    def free_symbols(self) -> list[str]:
        names: set[str] = set()
        for info in self.tensors.values():
            for d in info.shape or ():
                if isinstance(d, Expr):
                    names |= d.symbols()
        return sorted(names)

    def to_dict(self) -> dict[str, Any]:
        return {
            "symbols": dict(sorted(self.symbols.items())),
            "inputs": {n: shape_text(self.shape(n)) for n in self.inputs},
            "outputs": {n: shape_text(self.shape(n)) for n in self.outputs},
            "tensors": {n: {"dtype": _dtype_name(i.dtype), "shape": shape_text(i.shape)}
                        for n, i in self.tensors.items()},
            "unknown": list(self.unknown),
            "unknown_symbols": self.unknown_symbols(),
        }


def shape_text(shape: Sequence[Dim] | None) -> list[str | int] | None:
    """A shape for JSON: ints stay ints, expressions become text, unknown dims ``?``."""
    if shape is None:
        return None
    return [d if isinstance(d, int) else symdim.text(d) for d in shape]


def _dtype_name(dtype: int) -> str | None:
    return onnx.TensorProto.DataType.Name(dtype).lower() if dtype else None


# the walk ----------------------------------------------------------------------------------------
def infer_symbolic(model: onnx.ModelProto, input_shapes: InputShapes | None = None, *,
                   onnx_dims: bool = False) -> SymbolicShapes:
    """Symbolic shapes of every main-graph tensor of ``model`` (see the module docstring); the model is not
    modified. ``onnx_dims``: the model's ``value_info`` is ONNX's inference (as :func:`gsrewrite.shapes.inference.
    infer_shapes` hands it over), and a dim it gives statically wins over the rules' expression from the first walk
    on (without it, only once ONNX's inference is run as the fallback)."""
    given = input_shapes or InputShapes()
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]  # (a weight's shape may be given)
    check_names(InputShapes({n: d for n, d in given.shapes.items() if n not in initializers}), inputs, ())
    check_declared(given, (i for i in model.graph.input if i.name not in initializers))
    walk = _Walk(model, given)
    if onnx_dims:
        walk.onnx_types = {vi.name: vi for vi in (*model.graph.value_info, *model.graph.output)}
    walk.run()
    if given.bindings:  # a symbol of the model: declared, or met by the walk (ONNX's unk__N too)
        check_names(InputShapes(bindings=given.bindings, shapes={n: given.shapes[n] for n in given.shapes
                                                                 if n not in initializers}),
                    inputs, model_symbols(model) | set(walk.symbols))
    return walk.result


class _Walk:
    def __init__(self, model: onnx.ModelProto, given: InputShapes) -> None:
        self.model = model
        self.given = given
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        #: what is known of each tensor (a body's walk sees the enclosing graph's tensors too: a ChainMap)
        self.tensors: MutableMapping[str, Info] = {}
        self.symbols: dict[str, str] = {}
        self.fresh_count = 0
        self.fallback_ops: dict[str, int] = {}
        self.baseline: dict[str, Info] = {}
        self._incomplete = False
        self._read_early: set[str] = set()
        self._opset = self.opsets.get("", 0)
        self._fresh = self.fresh
        self.bindings: dict[str, int] = dict(given.bindings)
        #: tensor -> its type in the model's value_info (``onnx_dims``: ONNX's inference, whose static dims win)
        self.onnx_types: dict[str, onnx.ValueInfoProto] = {}
        #: how deep in If/Loop/Scan bodies this walk is (a body is walked by a walk of its own)
        self.depth = 0
        #: body nodes the walks may still visit, shared by every body's walk (a Loop walks its body twice: nested
        #: loops would multiply that); past it a body's outputs come from ONNX's inference
        self._body_work = [MAX_BODY_WORK]
        #: the bodies walked (shared by every body's walk): :attr:`SymbolicShapes.bodies`
        self.bodies: list[tuple[onnx.GraphProto, Mapping[str, Info]]] = []

    # symbols -------------------------------------------------------------------------------------
    def fresh(self, hint: str) -> Expr:
        self.fresh_count += 1
        name = f"{_identifier(hint)}_{self.fresh_count}"
        self.symbols[name] = hint
        return symdim.sym(name)

    def _bind(self, value: DimValue) -> DimValue:
        """``value`` with the sizes given (``seq=128``, or read off a given input shape) put in."""
        return symdim.bind(value, self.bindings) if self.bindings else value

    def _given_bindings(self, graph: onnx.GraphProto, initializers: set[str]) -> dict[str, int]:
        """The sizes given: ``SYMBOL=N``, and each symbol an input declares where the input's shape is given
        (``x:1,3,640,640`` on ``x [batch, 3, height, width]`` binds batch, height and width everywhere: in the
        other inputs, in the dims the model declares and ONNX's inference gives). A symbol given two sizes is an
        error."""
        from gsrewrite.errors import UsageError  # (here: the module's own import moves with the input-shape parser)

        bindings = dict(self.given.bindings)
        source = {name: f"{name}={size}" for name, size in bindings.items()}
        for value_info in graph.input:
            dims = self.given.shapes.get(value_info.name)
            tensor_type = value_info.type.tensor_type
            if dims is None or value_info.name in initializers or not tensor_type.HasField("shape") or \
                    len(tensor_type.shape.dim) != len(dims):
                continue
            for axis, (declared, size) in enumerate(zip(tensor_type.shape.dim, dims, strict=True)):
                name = symdim.symbol_name(symdim.from_dim_param(declared.dim_param)) \
                    if _named(declared.dim_param) else None
                if name is None or not isinstance(size, int):
                    continue
                where = f"{value_info.name}[{axis}] = {size}"
                if bindings.setdefault(name, size) != size:
                    raise UsageError(f"--input-shape gives {name!r} two sizes: {source[name]} and {where}")
                source.setdefault(name, where)
        return bindings

    def _dim_of(self, dim: onnx.TensorShapeProto.Dimension, where: str) -> DimValue:
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            return int(dim.dim_value)
        if dim.HasField("dim_param") and _named(dim.dim_param):
            value = symdim.from_dim_param(dim.dim_param)
            for name in symdim.symbols(value):
                self.symbols.setdefault(name, where)
            return self._bind(value)
        return self._bind(self.fresh(where))

    def _type_info(self, value_info: onnx.ValueInfoProto, where: str) -> Info:
        tensor_type = value_info.type.tensor_type
        if not value_info.type.HasField("tensor_type"):
            return Info()
        shape: Shape | None = None
        if tensor_type.HasField("shape"):
            shape = [self._dim_of(d, f"{where}[{i}]") for i, d in enumerate(tensor_type.shape.dim)]
        return Info(int(tensor_type.elem_type), shape)

    # the walk ------------------------------------------------------------------------------------
    def run(self) -> None:
        COUNTS.walks += 1
        graph = self.model.graph
        self.bindings = self._given_bindings(graph, {t.name for t in graph.initializer})
        for init in graph.initializer:
            self.tensors[init.name] = _constant_info(init)
        for value_info in graph.input:
            if value_info.name in self.tensors:
                continue
            info = self._type_info(value_info, value_info.name)
            if value_info.name in self.given.shapes:
                dims = [self._bind(d) for d in self.given.shapes[value_info.name]]
                for d in dims:
                    for name in symdim.symbols(d):
                        self.symbols.setdefault(name, value_info.name)
                info.shape = list(dims)
            self.tensors[value_info.name] = info
        input_symbols = set(self.symbols)
        given = dict(self.tensors)
        order: Iterable[onnx.NodeProto] = graph.node  # exporters write the nodes in order: walked as they are
        self._walk(order)
        if self._read_early & self.tensors.keys():  # a node read a tensor a later node produces: sort them
            self.tensors, self.fallback_ops, order = dict(given), {}, _topological(graph)
            self._walk(order)
        # ONNX's inference is the fallback: run it (and walk again) only when the rules leave a dim unknown
        if self._incomplete:
            self.tensors, self.fallback_ops = dict(given), {}
            self._baseline()
            self._walk(order)
        distinct: set[Dim] = set()
        unknown: list[str] = []
        for name, info in self.tensors.items():
            shape = info.shape
            if shape is None or any(map(_IS_NONE, shape)):
                unknown.append(name)
            if shape:
                distinct.update(shape)
        used: set[str] = set()  # the symbols of each distinct dim, once
        unresolved: set[Dim] = set()  # the dims in a symbol no input gives
        for dim in distinct:
            if isinstance(dim, Expr):
                names = dim.symbols()
                used |= names
                if not names <= input_symbols:
                    unresolved.add(dim)
        if unresolved:  # (a second look at the tensors, only for a model that has such dims)
            unknown = [name for name, info in self.tensors.items()
                       if info.shape is None or not unresolved.isdisjoint(info.shape) or any(map(_IS_NONE, info.shape))]
        initializers = {t.name for t in graph.initializer}
        self.result = SymbolicShapes(
            tensors=self.tensors if isinstance(self.tensors, dict) else dict(self.tensors),
            symbols={k: v for k, v in self.symbols.items() if k in used},
            bindings=dict(self.bindings),
            unknown=unknown,
            fallback_ops=self.fallback_ops,
            inputs=[i.name for i in graph.input if i.name not in initializers],
            outputs=[o.name for o in graph.output],
            input_symbols=input_symbols & used,
            bodies=self.bodies)

    def _walk(self, nodes: Iterable[onnx.NodeProto]) -> None:
        """Visit ``nodes`` in order; :attr:`_incomplete` says whether an output's type or a dim is still unknown,
        :attr:`_read_early` which inputs were read before anything gave them."""
        self._incomplete = False
        self._read_early = set()
        for node in nodes:
            self._visit(node)

    def _baseline(self) -> None:
        """ONNX's inference (and the handlers) on a data-free copy, with the given input dims."""
        skeleton = _skeleton(self.model, {name: info.shape for name, info in self.tensors.items()
                                          if name in self.given.shapes})
        inferred = infer_types(skeleton)
        for value_info in (*inferred.graph.value_info, *inferred.graph.output):
            if value_info.name not in self.baseline:
                self.baseline[value_info.name] = self._type_info(value_info, value_info.name)

    def _visit(self, node: onnx.NodeProto) -> None:
        op, domain = node.op_type, node.domain
        if domain == "ai.onnx":
            domain = ""
        attributes = node.attribute
        attrs = {a.name: _attr_value(a) for a in attributes} if attributes else {}
        output_names = list(node.output)
        if op in _CONTROL_FLOW and not domain:
            self._visit_control_flow(node, attrs, output_names)
            return
        if op == "Constant" and not domain:
            self._constant_node(node, attrs)
            if _incomplete(self.tensors[output_names[0]]):
                self._incomplete = True
            return
        tensors = self.tensors
        inputs: list[Info | None] = []
        for name in node.input:
            found = tensors.get(name) if name else None
            if found is None and name:
                self._read_early.add(name)
            inputs.append(found)
        outputs: list[Info | None] | None = None
        exact = False
        try:
            if not domain:
                rule = RULES.get(op)
                if rule is not None:
                    start_assumptions()
                    outputs = rule(NodeView(op, inputs, attrs, self._opset, len(output_names), self._fresh))
                    exact = not assumptions_made() and all(i is None or i.exact for i in inputs)
            elif domain not in STANDARD_DOMAINS:
                outputs = self._ask_handlers(node, inputs, attrs)  # (a plugin's answer: not proven here)
        except Exception as exc:  # a rule meeting a shape it did not expect: unknown, not an error
            log.debug("shape rule for %s (%s) failed: %s", node.name, op, exc)
        if outputs is not None and not exact:
            for out in outputs:
                if out is not None:
                    out.exact = False
        baseline = self.baseline
        for index, name in enumerate(output_names):
            if not name:
                continue
            info = outputs[index] if outputs is not None and index < len(outputs) else None
            merged = self._merge(info, baseline.get(name)) if baseline or info is None else info
            if self.onnx_types and merged.shape and any(map(_COMPOUND, merged.shape)) and name in self.onnx_types:
                merged = _with_static(merged, self.onnx_types[name])
            if info is None or info.shape is None or any(map(_IS_NONE, info.shape)):
                self.fallback_ops[op] = self.fallback_ops.get(op, 0) + 1
            if not self._incomplete and _incomplete(merged):
                self._incomplete = True
            tensors[name] = merged

    # control flow ---------------------------------------------------------------------------------
    def _visit_control_flow(self, node: onnx.NodeProto, attrs: dict[str, Any], output_names: list[str]) -> None:
        """If, Loop and Scan: their bodies walked with the node's inputs (outer tensors in scope); what a body
        cannot tell comes from ONNX's inference, as for any op."""
        inputs = [self.tensors.get(name) if name else None for name in node.input]
        for name, found in zip(node.input, inputs, strict=True):
            if found is None and name:
                self._read_early.add(name)
        bodies = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        outputs: list[Info | None] | None = None
        try:
            if self.depth < MAX_BODY_DEPTH:
                if node.op_type == "If":
                    outputs = self._if(node, inputs, bodies)
                elif node.op_type == "Loop":
                    outputs = self._loop(node, inputs, bodies.get("body"))
                else:
                    outputs = self._scan(node, inputs, attrs, bodies.get("body"))
        except Exception as exc:  # a body the walk does not understand: unknown, not an error
            log.debug("shape of %s (%s) failed: %s", node.name, node.op_type, exc)
        if outputs is not None:  # (joined branches, widened loop dims: not proven for every size)
            outputs = [None if out is None else dataclasses.replace(out, exact=False) for out in outputs]
        for index, name in enumerate(output_names):
            if not name:
                continue
            info = outputs[index] if outputs is not None and index < len(outputs) else None
            merged = self._merge(info, self.baseline.get(name))
            if info is None or info.shape is None or any(map(_IS_NONE, info.shape)):
                self.fallback_ops[node.op_type] = self.fallback_ops.get(node.op_type, 0) + 1
            if not self._incomplete and _incomplete(merged):
                self._incomplete = True
            self.tensors[name] = merged

    def _body(self, graph: onnx.GraphProto | None, formals: Sequence[Info | None]) -> list[Info | None] | None:
        """The types of ``graph``'s outputs, walked with ``formals`` as its inputs (a formal None keeps the type
        the body declares) and the enclosing tensors in scope."""
        if graph is None or self._body_work[0] < len(graph.node):
            return None
        self._body_work[0] -= len(graph.node)
        child = _Walk.__new__(_Walk)
        child.__dict__.update(self.__dict__)  # the model, symbols, bindings and fresh names are shared
        local: dict[str, Info] = {}
        child.tensors = collections.ChainMap(local, self.tensors)
        child.baseline = {}
        child.depth = self.depth + 1
        child._incomplete, child._read_early = False, set()
        for init in graph.initializer:
            local[init.name] = _constant_info(init)
        for index, declared in enumerate(graph.input):
            formal = formals[index] if index < len(formals) else None
            local[declared.name] = formal if formal is not None else child._type_info(declared, declared.name)
        for value_info in (*graph.value_info, *graph.output):  # the exporter's types: the body's fallback
            if value_info.type.HasField("tensor_type"):
                child.baseline[value_info.name] = child._type_info(value_info, value_info.name)
        child._walk(_topological(graph))
        self.bodies.append((graph, child.tensors))
        return [child.tensors.get(o.name) or child.baseline.get(o.name) for o in graph.output]

    def _if(self, node: onnx.NodeProto, inputs: list[Info | None],
            bodies: Mapping[str, onnx.GraphProto]) -> list[Info | None] | None:
        """The branch the condition picks when its value is known (its values too); else both branches, a dim
        they disagree on becoming a fresh symbol."""
        cond = _scalar_value(inputs[0] if inputs else None)
        if cond in (0, 1):
            return self._body(bodies.get("then_branch" if cond else "else_branch"), [])
        then, other = self._body(bodies.get("then_branch"), []), self._body(bodies.get("else_branch"), [])
        if then is None or other is None or len(then) != len(other):
            return None
        return [self._join(a, b, f"{node.name or 'If'}.{i}") for i, (a, b) in enumerate(zip(then, other, strict=True))]

    def _join(self, a: Info | None, b: Info | None, where: str) -> Info | None:
        """One type for two possible tensors: what they agree on (a dim they do not is a fresh symbol)."""
        if a is None or b is None:
            return None
        dtype = a.dtype or b.dtype
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return Info(dtype)
        shape: Shape = [x if x is not None and x == y else self.fresh(f"{where}[{axis}]")
                        for axis, (x, y) in enumerate(zip(a.shape, b.shape, strict=True))]
        both = a.has_value and b.has_value and a.value == b.value
        return Info(dtype, shape, a.value if both else None, both)

    def _loop(self, node: onnx.NodeProto, inputs: list[Info | None],
              body: onnx.GraphProto | None) -> list[Info | None] | None:
        """Loop-carried tensors as the body gives them: a dim that changes from one iteration to the next is a
        fresh symbol inside the body (walked again with it), and after the loop its start plus the trip count
        times its step when the step is the same every iteration (a Concat growing by a row); scan outputs
        stacked over the trip count: the trip-count input when the loop cannot stop earlier (no condition, or
        one the body keeps true), else a fresh symbol (a size only the run decides)."""
        if body is None:
            return None
        carried_count = max(len(node.input) - 2, 0)
        trip = _scalar_value(inputs[0]) if inputs and node.input[0] else None
        condition_given = len(node.input) > 1 and bool(node.input[1])
        first = _scalar_value(inputs[1]) if condition_given else 1
        initial: list[Info | None] = [_without_value(inputs[2 + i] if 2 + i < len(inputs) else None)
                                      for i in range(carried_count)]
        carried = initial
        outs: list[Info | None] | None = None
        for attempt in range(2):  # the second walk with the dims the first found changing
            cond_in = Info(onnx.TensorProto.BOOL, [], first, first is not None)
            outs = self._body(body, [Info(onnx.TensorProto.INT64, []), cond_in, *carried])
            if outs is None or len(outs) < 1 + carried_count:
                return None
            widened = [self._widen(before, after, f"{node.name or 'Loop'}.{i}")
                       for i, (before, after) in enumerate(zip(carried, outs[1:1 + carried_count], strict=True))]
            if attempt or all(_same_type(a, b) for a, b in zip(widened, carried, strict=True)):
                break
            carried = widened
        assert outs is not None
        if first == 0:
            count: Dim = 0
        elif isinstance(trip, (int, Expr)) and not (isinstance(trip, int) and trip >= _UNBOUNDED_TRIPS) and (
                not condition_given or _scalar_value(outs[0]) == 1):
            count = trip
        else:
            count = self.fresh(f"{node.name or 'Loop'}.iterations")
        finals = [self._after_loop(start, formal, last, count, f"{node.name or 'Loop'}.{i}")
                  for i, (start, formal, last) in enumerate(zip(initial, carried, outs[1:1 + carried_count],
                                                                strict=True))]
        stacked: list[Info | None] = []
        for info in outs[1 + carried_count:]:
            stacked.append(None if info is None or info.shape is None else Info(info.dtype, [count, *info.shape]))
        return [*finals, *stacked]

    def _after_loop(self, start: Info | None, formal: Info | None, last: Info | None, count: Dim,
                    where: str) -> Info | None:
        """A carried tensor's type after ``count`` iterations: each dim the body keeps, or that it changes by
        the same step every iteration (start + count * step); another changing dim is a fresh symbol."""
        if last is None or start is None or formal is None or start.shape is None or formal.shape is None or \
                last.shape is None or not len(start.shape) == len(formal.shape) == len(last.shape):
            return _without_value(last)
        dims: Shape = []
        for axis, (begin, inside, end) in enumerate(zip(start.shape, formal.shape, last.shape, strict=True)):
            if begin is not None and begin == inside == end:
                dims.append(begin)
                continue
            name = symdim.symbol_name(inside) if inside is not None else None
            step = symdim.sub(end, inside) if end is not None and inside is not None and name is not None else None
            if begin is None or count is None or step is None or name in symdim.symbols(step):
                dims.append(self.fresh(f"{where}[{axis}]"))
                continue
            dims.append(symdim.add(begin, symdim.mul(count, step)))
        return Info(last.dtype or start.dtype, dims)

    def _widen(self, before: Info | None, after: Info | None, where: str) -> Info | None:
        """A loop-carried type that holds at every iteration: the dims ``before`` and ``after`` agree on."""
        if before is None or before.shape is None or after is None:
            return before
        if after.shape is None or len(after.shape) != len(before.shape):
            return Info(before.dtype or after.dtype)
        return Info(before.dtype or after.dtype, [x if x is not None and x == y else self.fresh(f"{where}[{axis}]")
                                                  for axis, (x, y) in enumerate(zip(before.shape, after.shape,
                                                                                    strict=True))])

    def _scan(self, node: onnx.NodeProto, inputs: list[Info | None], attrs: dict[str, Any],
              body: onnx.GraphProto | None) -> list[Info | None] | None:
        """Scan (opset >= 9): states as the body gives them, scan outputs stacked over the scanned length."""
        scanned_count = int(attrs.get("num_scan_inputs", 0))
        if body is None or self._opset < 9 or not 0 < scanned_count <= len(inputs):
            return None
        states = [_without_value(info) for info in inputs[:len(inputs) - scanned_count]]
        scanned = inputs[len(inputs) - scanned_count:]
        axes = list(attrs.get("scan_input_axes") or [0] * scanned_count)
        slices: list[Info | None] = []
        length: Dim = None
        for info, axis in zip(scanned, axes, strict=False):
            if info is None or info.shape is None:
                slices.append(None)
                continue
            a = axis + len(info.shape) if axis < 0 else axis
            if not 0 <= a < len(info.shape):
                return None
            length = info.shape[a] if length is None else length
            slices.append(Info(info.dtype, [d for i, d in enumerate(info.shape) if i != a]))
        outs = self._body(body, [*states, *slices])
        if outs is None:
            return None
        finals = [_without_value(info) for info in outs[:len(states)]]
        out_axes = list(attrs.get("scan_output_axes") or [])
        stacked: list[Info | None] = []
        for j, info in enumerate(outs[len(states):]):
            if info is None or info.shape is None:
                stacked.append(None)
                continue
            axis = out_axes[j] if j < len(out_axes) else 0
            axis = axis + len(info.shape) + 1 if axis < 0 else axis
            shape = list(info.shape)
            shape.insert(axis, length)
            stacked.append(Info(info.dtype, shape))
        return [*finals, *stacked]

    def _merge(self, mine: Info | None, onnx_info: Info | None) -> Info:
        if mine is None:
            return onnx_info or Info()
        if onnx_info is None:
            return mine
        dtype = mine.dtype or onnx_info.dtype
        shape = mine.shape
        if shape is None:
            shape = onnx_info.shape
        elif onnx_info.shape is not None and len(onnx_info.shape) == len(shape):
            shape = [o if (d is None or (isinstance(o, int) and not isinstance(d, int))) else d
                     for d, o in zip(shape, onnx_info.shape, strict=True)]
        return Info(dtype, shape, mine.value, mine.has_value, mine.floats, mine.exact)

    def _constant_node(self, node: onnx.NodeProto, attrs: dict[str, Any]) -> None:
        for attr in node.attribute:
            if attr.name == "value" and attr.HasField("t"):
                self.tensors[node.output[0]] = _constant_info(attr.t)
                return
            if attr.name in ("value_int", "value_ints"):
                value = np.array(attrs[attr.name], dtype=np.int64)
                tracked = constant_value(value)
                self.tensors[node.output[0]] = Info(onnx.TensorProto.INT64, list(value.shape), tracked,
                                                    tracked is not None)
                return
            if attr.name in ("value_float", "value_floats"):
                value = np.array(attrs[attr.name], dtype=np.float32)
                tracked = constant_value(value)
                self.tensors[node.output[0]] = Info(onnx.TensorProto.FLOAT, list(value.shape), tracked,
                                                    tracked is not None,
                                                    floats=[float(v) for v in value.reshape(-1)])
                return
        self.tensors[node.output[0]] = self.baseline.get(node.output[0], Info())

    def _ask_handlers(self, node: onnx.NodeProto, inputs: list[Info | None],
                      attrs: dict[str, Any]) -> list[Info | None]:
        gs_inputs: list[gs.Tensor] = []
        for name, info in zip(node.input, inputs, strict=True):
            if not name:
                gs_inputs.append(gs.Variable.empty())
                continue
            dtype = onnx.helper.tensor_dtype_to_np_dtype(info.dtype) if info is not None and info.dtype \
                else None
            shape = None if info is None or info.shape is None else list(info.shape)
            gs_inputs.append(gs.Variable(name, dtype=dtype, shape=shape))
        gs_node = gs.Node(node.op_type, node.name, attrs=attrs, inputs=gs_inputs,
                          outputs=[gs.Variable(o) for o in node.output], domain=node.domain)
        answer = plugin_hooks.infer_shape(gs_node, ShapeContext(dict(self.opsets))) or ()
        out: list[Info | None] = []
        for known in answer:
            if known is None:
                out.append(None)
                continue
            answer_dtype, answer_shape = known
            elem = 0 if answer_dtype is None else (
                int(answer_dtype) if isinstance(answer_dtype, int) else
                onnx.helper.np_dtype_to_tensor_dtype(np.dtype(answer_dtype)))
            dims = None if answer_shape is None else [_as_dim(d) for d in answer_shape]
            out.append(Info(elem, None if dims is None else [None if d is None else self._bind(d) for d in dims]))
        return out


#: ops whose bodies the walk walks
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
#: nesting of bodies walked (deeper ones: ONNX's inference)
MAX_BODY_DEPTH = 8
#: body nodes walked in all, per model (each walk of a body counts its nodes)
MAX_BODY_WORK = 200_000
#: a Loop trip count this large is a while loop's (exporters write INT64_MAX)
_UNBOUNDED_TRIPS = 2**31


def _compound(dim: Dim) -> bool:
    """Whether ``dim`` is unknown or an expression of more than one symbol (a sum, a floor division, ...), where the
    rules may know less than ONNX's inference: an int or one symbol is as precise as a dim gets."""
    return dim is None or (isinstance(dim, Expr) and symdim.symbol_name(dim) is None)


_COMPOUND = _compound


def _with_static(info: Info, value_info: onnx.ValueInfoProto) -> Info:
    """``info`` with the dims ``value_info`` gives statically in place of its own expressions."""
    shape = info.shape
    declared = value_info.type.tensor_type.shape.dim
    if shape is None or len(declared) != len(shape):
        return info
    dims: Shape = list(shape)
    changed = False
    for axis, (mine, theirs) in enumerate(zip(shape, declared, strict=True)):
        if not isinstance(mine, int) and theirs.HasField("dim_value") and theirs.dim_value >= 0:
            dims[axis], changed = int(theirs.dim_value), True
    return dataclasses.replace(info, shape=dims) if changed else info


def _named(dim_param: str) -> bool:
    """Whether a ``dim_param`` names a dim (paddle2onnx writes ``?`` for "unknown": two such dims of one input
    are not one size)."""
    return bool(dim_param) and dim_param.strip("?") != ""


def _scalar_value(info: Info | None) -> Any:
    """The element of a scalar (or one-element) tensor's tracked value; None when it is not tracked."""
    if info is None or not info.has_value:
        return None
    value = info.value
    if isinstance(value, list):
        return value[0] if len(value) == 1 else None
    return value


def _without_value(info: Info | None) -> Info | None:
    """``info``'s type alone (a value that changes from one iteration to the next is not known)."""
    return None if info is None else Info(info.dtype, None if info.shape is None else list(info.shape))


def _same_type(a: Info | None, b: Info | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape


def _incomplete(info: Info) -> bool:
    """Whether ``info`` lacks the type, the rank or a dim."""
    if info.shape is None or not info.dtype:
        return True
    return any(map(_IS_NONE, info.shape))


#: ``dim is None`` as a function for ``map`` (``None in shape`` calls each expression's ``__eq__``)
_IS_NONE = functools.partial(operator.is_, None)


def _as_dim(d: object) -> Dim:
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
        return int(d)
    if isinstance(d, Expr):
        return d
    if isinstance(d, str):
        return symdim.from_dim_param(d)
    return None


def _identifier(text: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in text).strip("_") or "d"
    return cleaned if not cleaned[0].isdigit() else f"d{cleaned}"


def _constant_info(tensor: onnx.TensorProto) -> Info:
    dims = [int(d) for d in tensor.dims]
    info = Info(int(tensor.data_type), list(dims))
    size = math.prod(dims)
    if size <= SMALL_CONSTANT and tensor.data_location != onnx.TensorProto.EXTERNAL:
        try:
            array = numpy_helper.to_array(tensor)
        except Exception:  # unreadable data: the shape is still known
            return info
        if array.dtype.kind in "iubf":
            info.value = constant_value(array)
            info.has_value = info.value is not None
        if array.dtype.kind == "f":
            info.floats = [float(v) for v in array.reshape(-1)]
    return info


def _attr_value(attr: onnx.AttributeProto) -> Any:
    if attr.type == onnx.AttributeProto.TENSOR:
        return attr.t
    if attr.type == onnx.AttributeProto.GRAPH:
        return None
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _topological(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes in an order where every producer comes first (ONNX requires it; hostile models may not)."""
    nodes = list(graph.node)
    produced_by: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.output:
            if name:
                produced_by.setdefault(name, i)
    if all(produced_by.get(name, -1) < i for i, node in enumerate(nodes) for name in node.input):
        return nodes  # already in order (every exporter's output): the walk below would keep it
    order: list[onnx.NodeProto] = []
    state = [0] * len(nodes)  # 0 new, 1 in progress, 2 done
    for root in range(len(nodes)):
        if state[root]:
            continue
        stack = [(root, False)]
        while stack:
            index, expanded = stack.pop()
            if expanded:
                state[index] = 2
                order.append(nodes[index])
                continue
            if state[index]:
                continue
            state[index] = 1
            stack.append((index, True))
            for name in nodes[index].input:
                producer = produced_by.get(name)
                if producer is not None and state[producer] == 0:
                    stack.append((producer, False))
    return order


def _skeleton(model: onnx.ModelProto, shapes: Mapping[str, Shape | None]) -> onnx.ModelProto:
    """``model`` without large initializer data (declared as inputs instead) and with the given input dims:
    what ONNX inference needs, at a fraction of a 200 MB model's serialization."""
    skeleton = onnx.ModelProto()
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    graph = skeleton.graph
    source = model.graph
    graph.name = source.name
    graph.node.extend(source.node)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    declared = {i.name for i in source.input}
    for value_info in source.input:
        if value_info.name in shapes and shapes[value_info.name] is not None:
            dims = shapes[value_info.name]
            assert dims is not None
            graph.input.append(onnx.helper.make_tensor_value_info(
                value_info.name, value_info.type.tensor_type.elem_type,
                [d if isinstance(d, int) else (symdim.text(d) if d is not None else None) for d in dims]))
        else:
            graph.input.append(value_info)
    for init in source.initializer:
        size = math.prod(init.dims)
        if size <= SMALL_CONSTANT and init.data_location != onnx.TensorProto.EXTERNAL:
            graph.initializer.append(init)
        elif init.name not in declared:
            graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return skeleton


def value_info(shapes: SymbolicShapes, name: str) -> onnx.ValueInfoProto | None:
    """``name``'s type as a value_info (expressions as ``dim_param``), or None when its type is unknown."""
    info = shapes.tensors.get(name)
    if info is None or not info.dtype or info.shape is None:
        return None
    dims = [d if isinstance(d, int) else (symdim.text(d) if d is not None else None) for d in info.shape]
    return onnx.helper.make_tensor_value_info(name, info.dtype, dims)


def annotate(model: onnx.ModelProto, shapes: SymbolicShapes) -> onnx.ModelProto:
    """A copy of ``model`` whose ``value_info`` holds every inferred intermediate type (expressions as
    ``dim_param``); graph inputs and outputs keep what they declare, unknown outputs gain the inferred."""
    annotated = onnx.ModelProto()
    annotated.CopyFrom(model)
    graph = annotated.graph
    skip = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    outputs = {o.name: o for o in graph.output}
    del graph.value_info[:]
    for name, info in shapes.tensors.items():
        if name in skip or not info.dtype or info.shape is None:
            continue
        dims = [d if isinstance(d, int) else (symdim.text(d) if d is not None else None) for d in info.shape]
        value_info = onnx.helper.make_tensor_value_info(name, info.dtype, dims)
        if name in outputs:
            declared = outputs[name].type.tensor_type
            if not declared.HasField("shape") or not declared.elem_type:
                outputs[name].CopyFrom(value_info)
            continue
        graph.value_info.append(value_info)
    return annotated
