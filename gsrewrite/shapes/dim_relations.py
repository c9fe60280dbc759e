"""Relations the graph imposes between its input dims, solved for the dims that follow from others.

A model declares each input dim on its own (``attention_mask [batch, total_sequence]``, ``input_ids [batch,
sequence]``, ``past_key_values.0.key [batch, 4, past_sequence, 8]``), but its graph only runs when some of them
agree: the mask's bias is added to scores over ``past_sequence + sequence`` keys, so ``total_sequence`` must equal
that sum. Inputs drawn with each symbol on its own are rejected by the model.

:func:`solve_input_dims` finds those relations the way a shape checker would: it walks the graph symbolically
(:mod:`gsrewrite.shapes.walk`) and collects the places where two dims must be equal (broadcasting
operands where neither is 1, the contracted dims of a MatMul, the kept axes of a Concat), then solves every
relation that is linear in one of the input symbols (``total_sequence = past_sequence + sequence``; ``sequence =
1`` from a declared ``past_sequence + 1``), substitutes, and walks again until nothing new is found. Dim
expressions the model declares (``dim_param = "past_sequence + sequence"``) are relations too: they are read as
expressions by the walk.

What is solved is a proposal: the caller runs the model on inputs of those sizes, which is the proof.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx

from gsrewrite.shapes import symdim
from gsrewrite.shapes.dim_minimums import minimum_sizes
from gsrewrite.shapes.rules import Dim, Info
from gsrewrite.shapes.symdim import DimValue, Expr, Sym
from gsrewrite.shapes.walk import InputShapes, SymbolicShapes, infer_symbolic

log = logging.getLogger(__name__)

#: Walks at most: each solves what the one before could not see (a relation behind a ``max`` of two dims).
MAX_ROUNDS = 4

#: Ops whose operands broadcast against each other (numpy rules): dims other than 1 must agree.
BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
    "And", "Or", "Xor", "Max", "Min", "Sum", "Mean", "PRelu", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
})


@dataclass
class DimSolution:
    """Input symbols that follow from others (``derived``), those left free, and what could not be solved."""

    #: symbol -> its value in the free symbols (an int or an expression)
    derived: dict[str, DimValue] = field(default_factory=dict)
    #: the input symbols not derived, in the order the inputs name them
    free: list[str] = field(default_factory=list)
    #: relations found and not solvable for one input symbol (``h*w = 256``), as text, with the node
    unsolved: list[str] = field(default_factory=list)
    #: relations that contradict the model's fixed dims (``sequence = 16`` and ``sequence = 32``), as text
    conflicts: list[str] = field(default_factory=list)
    #: relations the graph suggests without requiring them (see :func:`suggested_relations`), to try in order
    suggested: list[tuple[DimValue, DimValue]] = field(default_factory=list)
    #: sums of input symbols the graph computes over (``past_sequence + sequence``), most used first
    sums: list[Expr] = field(default_factory=list)
    #: free symbol -> the smallest size the graph's ops accept (:mod:`gsrewrite.shapes.dim_minimums`)
    minimums: dict[str, int] = field(default_factory=dict)

    def value(self, dim: DimValue, bindings: Mapping[str, int]) -> int:
        """The size of ``dim`` (an input dim) with the free symbols bound (``KeyError``: one is not)."""
        return symdim.evaluate(substitute(dim, self.derived), bindings)

    def describe(self) -> list[str]:
        """``total_sequence = past_sequence + sequence``, one line per derived symbol."""
        return [f"{name} = {symdim.text(value)}" for name, value in self.derived.items()]


def solve_input_dims(model: onnx.ModelProto, fixed: Mapping[str, int] | None = None) -> DimSolution:
    """The relations between the input dims of ``model`` (see the module docstring). ``fixed``: symbols the
    caller already bound (never derived; a relation between them is only checked)."""
    fixed = dict(fixed or {})
    dims = input_dims(model)
    order = _symbols_in_order(dims.values())
    solution = DimSolution()
    seen: set[tuple[str, str]] = set()
    shapes_seen: SymbolicShapes | None = None
    for _ in range(MAX_ROUNDS):
        given = InputShapes(shapes={name: [substitute(d, solution.derived) for d in shape if d is not None]
                                    for name, shape in dims.items()
                                    if shape is not None and all(d is not None for d in shape)})
        try:
            shapes = infer_symbolic(model, given)  # inputs with an unnamed dim: the walk names it
        except Exception as exc:  # a walk that fails tells us nothing; the run of the model will decide
            log.debug("dim relations: the symbolic walk failed: %s", exc)
            break
        shapes_seen = shapes
        progress = False
        for left, right, where in relations(model.graph, shapes):
            left, right = substitute(left, solution.derived), substitute(right, solution.derived)
            key = (symdim.text(left), symdim.text(right))
            if left == right or key in seen:
                continue
            seen.add(key)
            progress |= _solve_one(left, right, where, set(order), fixed, solution)
        if not progress:
            break
    solution.free = [name for name in order if name not in solution.derived]
    if shapes_seen is not None:
        solution.sums = _sums(shapes_seen, set(order))
        solution.suggested = suggested_relations(model, dims, shapes_seen, solution)
        solution.minimums = _free_minimums(minimum_sizes(model.graph, shapes_seen, set(order)), solution)
    if solution.derived:
        log.info("input dims tied by the graph: %s", "; ".join(solution.describe()))
    return solution


def _free_minimums(minimums: Mapping[str, int], solution: DimSolution) -> dict[str, int]:
    """``minimums`` of input symbols as minimums of the free ones (a derived symbol that is another's name)."""
    out: dict[str, int] = {}
    for name, size in minimums.items():
        free = symdim.symbol_name(solution.derived[name]) if name in solution.derived else name
        if free is not None and free in solution.free:
            out[free] = max(out.get(free, 0), size)
    return out


def with_relation(solution: DimSolution, left: DimValue, right: DimValue) -> DimSolution | None:
    """A copy of ``solution`` with ``left = right`` solved in too, or None when it cannot be (or changes
    nothing)."""
    left, right = substitute(left, solution.derived), substitute(right, solution.derived)
    if left == right:
        return None
    copy = DimSolution(dict(solution.derived), [], list(solution.unsolved), list(solution.conflicts),
                       sums=list(solution.sums), minimums=dict(solution.minimums))
    inputs = set(solution.free) | set(solution.derived)
    if not _solve_one(left, right, "suggested", inputs, {}, copy):
        return None
    copy.free = [name for name in solution.free if name not in copy.derived]
    return copy


def suggested_relations(model: onnx.ModelProto, dims: Mapping[str, list[DimValue | None] | None],
                        shapes: SymbolicShapes, solution: DimSolution) -> list[tuple[DimValue, DimValue]]:
    """Relations the graph suggests but does not require: an integer or bool input (a mask) with a dim of its
    own (a symbol no other input names, or an expression no other input has) where the graph computes over a
    sum of input dims (``past_sequence + sequence``: the keys of a decoder with a cache). Exporters that read
    the mask by index (transformers' ``GatherND`` over ``Range(past + sequence)``) run with a longer mask too,
    so no relation requires it; the mask still means one entry per key. Most used sums first."""
    sums = solution.sums
    if not sums:
        return []
    integer = {vi.name for vi in model.graph.input if vi.type.tensor_type.elem_type in _INTEGER_TYPES}
    where: dict[str, set[str]] = {}
    for name, shape in dims.items():
        for dim in shape or ():
            if dim is not None and not isinstance(dim, int):
                where.setdefault(symdim.text(dim), set()).add(name)
                for used in dim.symbols():
                    where.setdefault(used, set()).add(name)
    found: list[tuple[DimValue, DimValue]] = []
    for name in sorted(integer & dims.keys()):
        for dim in dims[name] or ():
            if dim is None or isinstance(dim, int) or len(where.get(symdim.text(dim), ())) != 1:
                continue
            symbol = symdim.symbol_name(dim)
            if symbol is not None and len(where.get(symbol, ())) != 1:
                continue  # a bare symbol some other input names too (batch, sequence)
            value = substitute(dim, solution.derived)
            bare = symdim.symbol_name(value)
            found += [(dim, total) for total in sums  # a bare symbol the sum adds up is a term, not the sum
                      if total != value and not (bare is not None and bare in total.symbols())]
    return found


#: ONNX element types of integer and bool tensors
_INTEGER_TYPES = frozenset({2, 3, 4, 5, 6, 7, 9, 12, 13})


def _sums(shapes: SymbolicShapes, inputs: set[str]) -> list[Expr]:
    """Sums of two or more input symbols (``past_sequence + sequence``, maybe ``+ 1``) that are dims of the
    graph's tensors, most frequent first."""
    counts: dict[Expr, int] = {}
    for info in shapes.tensors.values():
        for dim in info.shape or ():
            if isinstance(dim, Expr) and dim in counts:
                counts[dim] += 1
            elif isinstance(dim, Expr) and _is_sum(dim, inputs):
                counts[dim] = 1
    return sorted(counts, key=lambda d: -counts[d])


def _is_sum(dim: Expr, inputs: set[str]) -> bool:
    symbols = [m for m, c in dim.terms if m]
    return (len(symbols) >= 2 and dim.symbols() <= inputs
            and all(len(m) == 1 and isinstance(m[0][0], Sym) and m[0][1] == 1 and c == 1 for m, c in dim.terms if m))


def input_dims(model: onnx.ModelProto) -> dict[str, list[DimValue | None] | None]:
    """Every fed input's dims as the model declares them: ints, expressions of its ``dim_param`` names, or a
    symbol of their own, ``input:axis``, for an unnamed (or negative) dim (the name the input planner gives it,
    :mod:`gsrewrite.validation.dims`: a relation may tie it to a named one); ``None`` for an input without a
    shape."""
    initializers = {t.name for t in model.graph.initializer}
    out: dict[str, list[DimValue | None] | None] = {}
    for value_info in model.graph.input:
        if value_info.name in initializers or not value_info.type.HasField("tensor_type"):
            continue
        tensor_type = value_info.type.tensor_type
        if not tensor_type.HasField("shape"):
            out[value_info.name] = None
            continue
        shape: list[DimValue | None] = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value >= 0:
                shape.append(int(dim.dim_value))
            elif dim.HasField("dim_param") and dim.dim_param:
                shape.append(symdim.from_dim_param(dim.dim_param))
            else:
                shape.append(symdim.sym(f"{value_info.name}:{len(shape)}"))
        out[value_info.name] = shape
    return out


def substitute(value: DimValue, derived: Mapping[str, DimValue]) -> DimValue:
    """``value`` with every derived symbol replaced by its value (polynomials only; other atoms stay)."""
    if isinstance(value, int) or not derived or not (value.symbols() & derived.keys()):
        return value
    total: DimValue = 0
    for monomial, coefficient in value.terms:
        term: DimValue = coefficient
        for atom, power in monomial:
            base: DimValue = derived.get(atom.name, Expr.atom(atom)) if isinstance(atom, Sym) else Expr.atom(atom)
            for _ in range(power):
                term = symdim.mul(term, base)
        total = symdim.add(total, term)
    return total


def relations(graph: onnx.GraphProto, shapes: SymbolicShapes) -> list[tuple[DimValue, DimValue, str]]:
    """Pairs of dims the graph needs equal, with the node that needs it: broadcasting operands (dims other
    than 1), a MatMul's contracted dims, a Concat's kept axes, a recurrent op's batch; in the main graph and in
    the If/Loop/Scan bodies the walk went through (a VAD model's LSTM state, read in an If branch)."""
    found = _relations(graph.node, shapes.shape)
    for body, tensors in shapes.bodies:
        found += _relations(body.node, lambda name, known=tensors: _shape_of(known, name))  # type: ignore[misc]
    return found


def _shape_of(tensors: Mapping[str, Info], name: str) -> list[Dim] | None:
    info = tensors.get(name)
    return None if info is None or info.shape is None else list(info.shape)


#: recurrent ops: X [seq, batch, input] and the initial states [directions, batch, hidden] (layout 0; layout 1
#: puts the batch first in both: X [batch, seq, input], states [batch, directions, hidden])
_RECURRENT = frozenset({"LSTM", "GRU", "RNN"})


def _relations(nodes: Iterable[onnx.NodeProto], shape_of: Callable[[str], list[Dim] | None]
               ) -> list[tuple[DimValue, DimValue, str]]:
    found: list[tuple[DimValue, DimValue, str]] = []
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            continue
        operands = [shape_of(name) if name else None for name in node.input]
        where = node.name or node.op_type
        if node.op_type in BROADCASTING:
            found += [(a, b, where) for a, b in _broadcast_pairs([s for s in operands if s is not None])]
        elif node.op_type == "MatMul" and len(operands) == 2 and operands[0] and operands[1]:
            a, b = operands[0], operands[1]
            inner = b[-2] if len(b) >= 2 else b[-1]
            if a[-1] is not None and inner is not None:
                found.append((a[-1], inner, where))
            if len(a) > 2 and len(b) > 2:
                found += [(x, y, where) for x, y in _broadcast_pairs([a[:-2], b[:-2]])]
        elif node.op_type == "Concat":
            found += [(a, b, where) for a, b in _concat_pairs(node, [s for s in operands if s is not None])]
        elif node.op_type in _RECURRENT:
            found += [(a, b, where) for a, b in _recurrent_pairs(node, operands)]
    return found


def _recurrent_pairs(node: onnx.NodeProto, operands: Sequence[Sequence[Dim] | None]
                     ) -> Iterable[tuple[DimValue, DimValue]]:
    """The batch of X against the batch of the initial states (inputs 5 and 6: initial_h, initial_c)."""
    batch = 1 - next((a.i for a in node.attribute if a.name == "layout"), 0)  # layout 1: the batch comes first
    x = operands[0] if operands else None
    if x is None or len(x) != 3 or x[batch] is None:
        return
    for state in operands[5:7]:
        if state is not None and len(state) == 3 and state[batch] is not None and state[batch] != x[batch]:
            yield x[batch], state[batch]  # type: ignore[misc]


def _broadcast_pairs(shapes: Sequence[Sequence[Dim]]) -> Iterable[tuple[DimValue, DimValue]]:
    rank = max((len(s) for s in shapes), default=0)
    for axis in range(1, rank + 1):
        dims = [s[-axis] for s in shapes if len(s) >= axis and s[-axis] is not None and s[-axis] != 1]
        for other in dims[1:]:
            if other != dims[0]:
                yield dims[0], other  # type: ignore[misc]


def _concat_pairs(node: onnx.NodeProto, shapes: Sequence[Sequence[Dim]]) -> Iterable[tuple[DimValue, DimValue]]:
    axis = next((a.i for a in node.attribute if a.name == "axis"), None)
    if axis is None or len(shapes) < 2 or len({len(s) for s in shapes}) != 1:
        return
    rank = len(shapes[0])
    axis = axis + rank if axis < 0 else axis
    for position in range(rank):
        if position == axis:
            continue
        dims = [s[position] for s in shapes if s[position] is not None]
        for other in dims[1:]:
            if other != dims[0]:
                yield dims[0], other  # type: ignore[misc]


def _solve_one(left: DimValue, right: DimValue, where: str, inputs: set[str], fixed: Mapping[str, int],
               solution: DimSolution) -> bool:
    """Solve ``left = right`` for one input symbol (adding it to ``solution.derived``); False when it cannot."""
    difference = symdim.sub(left, right)
    text = f"{symdim.text(left)} = {symdim.text(right)} (at {where})"
    if isinstance(difference, int):
        if difference != 0:
            solution.conflicts.append(text)
        return False
    if not difference.symbols() <= inputs:  # a dim only the walk named (unknown to ONNX): nothing to solve
        return False
    choice = _pick(difference, set(fixed) | set(solution.derived))
    if choice is None:
        solution.unsolved.append(text)
        return False
    name, coefficient = choice
    rest = symdim.sub(difference, symdim.mul(symdim.sym(name), coefficient))
    value = symdim.mul(rest, -coefficient)  # coefficient is +-1: dividing is multiplying
    if not isinstance(value, int) and name in value.symbols():
        return False
    solution.derived = {key: substitute(v, {name: value}) for key, v in solution.derived.items()}
    solution.derived[name] = value
    return True


def _pick(difference: Expr, taken: set[str]) -> tuple[str, int] | None:
    """The symbol to solve ``difference = 0`` for, and its coefficient: one that appears only as a degree-1
    term with coefficient +-1, not inside a max/floor (an atom). Preferred: the symbol whose sign is alone
    among the symbols' (``total - past - sequence``: ``total``), then the last named."""
    linear: dict[str, int] = {}
    elsewhere: set[str] = set()
    for monomial, coefficient in difference.terms:
        if len(monomial) == 1 and isinstance(monomial[0][0], Sym) and monomial[0][1] == 1:
            linear[monomial[0][0].name] = coefficient
        else:
            for atom, _ in monomial:
                elsewhere |= atom.symbols()
    candidates = {n: c for n, c in linear.items() if abs(c) == 1 and n not in elsewhere and n not in taken}
    if not candidates:
        return None
    signs = [c for c in linear.values()]
    alone = [n for n, c in candidates.items() if signs.count(c) == 1]
    name = sorted(alone or candidates)[-1]
    return name, candidates[name]


def _symbols_in_order(shapes: Iterable[list[DimValue | None] | None]) -> list[str]:
    order: list[str] = []
    for shape in shapes:
        for dim in shape or ():
            for name in sorted(symdim.symbols(dim)) if dim is not None else ():
                if name not in order:
                    order.append(name)
    return order
