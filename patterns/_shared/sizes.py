"""The sequence lengths a shape-dependent proof runs at, chosen so that no threshold its constants make can hide.

A check that proves what a side computation holds (a mask's score bias, position ids, rotary tables) by
running it (:mod:`gsrewrite_patterns._shared.producers`) proves it only at the lengths it runs. One sampled length is
not enough: a sliding-window mask ``j - i < 20`` *is* the plain causal mask at length 7. Such a computation
can only change its behaviour with the length where a length-derived value (a Range, a Shape, a count of mask
ones) crosses a threshold, and every threshold is made of the computation's constants. So:

* **Structural constants.** A constant is *value-side* when every path from it to the result only scales or
  moves values (``Mul``, ``MatMul``, ``Neg``, a float ``Div``'s numerator, the branches of ``Where``, the data
  input of ``Expand``/``Reshape``/``Slice``/``Gather``/``Concat``..., ``Cast`` to float, smooth functions such
  as ``Cos``/``Sin``/``Exp``): the masked value -10000, float32's lowest, rotary frequencies. Every
  other constant is *structural*: it may meet a length in a comparison, an ``Add``/``Sub``, a ``Range``, an
  index, a shape, a ``Where`` condition, a ``Mod``/``Div``/``Clip``/``Min``... (``Add``/``Sub`` count as
  structural too: an offset is how a window is written).
* **The bound.** A threshold built from those constants with one chain of products and quotients (``j - i >=
  20``, ``(j - i) * 0.001 > 3``, ``seq // 100 + 20``) is at most the product, over every use of a structural
  constant, of ``max(|c|, 1/|c|)`` (zeros, non-finite values and 1s contribute nothing).
  :func:`threshold_bound` computes it for graph constants, :func:`length_bound` for a whole computation.
* **Computed constants.** A threshold need not be a constant of the graph: ``Exp(ln 200 + 0 * S)`` (``S`` a
  length read from a Shape, so nothing folds it), ``Pow(2, log2 200 + 0 * S)`` or a static dim read through
  ``Shape`` is 200 (or 768), while no constant is above 7.7. :func:`probe_values` evaluates every tensor of
  the computation at the small sizes of :data:`PROBES`; one with the same shape and values at each is a
  *computed constant* (:func:`computed_constants`), and its values count like a constant's at each
  structural use by a node that also reads a value that follows the sizes (where it meets a length: a
  chain of casts of one static dim counts once). The graph's own constants still count wherever they are,
  so a tensor that only looks constant at the probes (``Where(S > 250, 1000, 200)``) is covered by its 250.
* **Functions of a length.** Every op is taken to move a threshold at most in proportion, except those that
  grow slower than their input, applied (structurally) to a value that follows the sizes: a threshold ``T``
  on ``Sqrt(n)`` is ``T^2`` on ``n`` (``20 sqrt(n) < n`` past 400), on ``Pow(n, e)`` ``T^(1/e)`` for
  ``e < 1``, on ``Log``/``Asinh``/``Acosh`` ``e^T`` (``40 ln(n)`` is refused), on ``Sigmoid``/``Tanh``/``Erf``
  at most :data:`SATURATION` times ``T``; a constant base of ``Pow(c, n)`` counts ``1/|ln c|``, a
  ``BitShift`` by ``s`` ``2^s``, a ``ConstantOfShape``'s value its own. Periodic functions of a length
  and those that near their limit slowly (``Cos``, ``Atan``, ``Softsign``, ...) are refused.
* **Tables.** A constant table (a registered causal buffer, position ids, a cos/sin cache) sliced by the
  length can hide anything in its later rows; at the length of its largest dim the computation reads all of
  it (:func:`table_lengths`). Beyond a table's end the model itself cannot run (the slice stops short, the
  shapes no longer broadcast, a lookup is out of range): when a needed length is past a table,
  :func:`runnable_limit` tries one past its end, and if the model cannot run there no length past it is
  needed, so a threshold beyond every table the model slices is no reason to refuse. Callers also leave out
  lengths at which the computation fails or its result does not have the length (:func:`runs_at`), and need
  at least one left.
* **The lengths.** :func:`proof_lengths` gives 7, 33, 130 (odd, even-ish, past 128), ``M + 2`` and
  ``2M + 3`` for the bound ``M`` (past the threshold, and past it doubled, for comparisons of doubled
  positions) and the tables' lengths, up to the longest the model can run. Above :data:`MAX_LENGTH`, or when
  a ``[batch, L, L]`` int64 grid at such a length would exceed :data:`MAX_BYTES`, the proof is refused
  (NotProven with the reason) rather than weakened. Long lengths use batch 1. :func:`plan_lengths` puts
  bound, tables and limit together.
* **The batch.** A threshold can sit on the batch index too (a Range over the batch compared with a
  constant): with a symbolic batch, the shortest length also runs at batch ``M + 2`` and ``2M + 3``.
* **Shape-derived windows** (``seq // 2``, ``seq - 1``) scale with the length, so they already show at the
  base lengths. An input read only for its shape whose dims are not the mask's (declared with another name)
  would be a free size the test cannot sweep: such computations are refused by the callers
  (:func:`foreign_dims`); unnamed dims and dims inference left as ``unk__N`` are taken to be the mask's at the
  same axis, which is what exporters read (the shape of ``input_ids`` or of the hidden states).

Limits. Adding constants (``j - i - 64 - 64 - 64``) is covered too, since each use multiplies the bound (64^3:
refused); float rounding (``(d + 2^32) - 2^32`` is 0 for small ``d``) needs an ``Add`` of a constant, which
is structural (refused). The bound is conservative, not tight: computed constants multiply with the constants
they are made of (``Exp(ln 200 + 0 * S)`` gives 1060, ``Pow(2, 7.64 + 0 * S)`` 3060, refused for its
6119-token grid), the transforms apply to the whole product, and a tensor that follows the sizes but happens to
be equal at the three probes counts as a constant. A table's values count where they are structural, so a
sliced position buffer of 64 rows multiplies the bound by 63 (lengths stop at its end, the batch does not).
Assumed: a model that cannot run one past a table's end cannot run at any longer length (slices and lookups
end there). Unseen: a threshold made only of value-side float overflow (``d * 1e36`` becomes inf past ``d =
340``, with no Add, comparison or Where condition after it); integer overflow of products of lengths (``n * n
* n`` in int32 wraps past 1290, no constant involved); functions not listed above that grow slower than their
input; and a stand-in assumption that is wrong (a dim called ``unk__N`` that is not the mask's). If, Loop and
Scan are refused (:func:`~gsrewrite_patterns._shared.producers.computation`). A threshold from a graph input's
*value* cannot occur: the bias may read only the mask's values, position ids and rotary tables no input values
at all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import constant_values

from .producers import NotProven, computation, evaluator, outputs_evaluator, stand_in, submodel

logger = logging.getLogger(__name__)

#: The lengths every proof runs at (besides the bound-derived ones).
BASE_LENGTHS = (7, 33, 130)
#: Longest length a proof may need; a larger bound refuses the proof.
MAX_LENGTH = 8192
#: Largest [batch, L, L] int64 grid a proof may build.
MAX_BYTES = 256 << 20
#: Lengths above this run with batch 1.
LONG_LENGTH = 256

_DATA_ONLY = frozenset({"Expand", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Identity", "Tile",
                        "Slice", "Gather", "GatherND", "GatherElements", "Neg"})
_FLOAT_TYPES = frozenset({1, 10, 11, 16})  # float, float16, double, bfloat16
#: smooth elementwise functions (rotary tables: cos/sin of positions times frequencies): no threshold either
_SMOOTH = frozenset({"Cos", "Sin", "Exp", "Tanh", "Sigmoid", "Sqrt", "Reciprocal"})
#: the largest bound computed (a product past it means "refuse" anyway)
BOUND_CAP = 1e18
#: (batch, length) at which every tensor of a computation is evaluated to tell the computed constants (the same
#: at each) from the values that follow the sizes; small, since every tensor is kept
PROBES = ((2, 7), (3, 5), (5, 12))
#: |x| beyond which Sigmoid, Tanh and Erf return their limit exactly (float64's sigmoid: 36.7), so a threshold
#: on their output is one on their input at most this large (times the output threshold's own factor)
SATURATION = 37.0
#: functions of a length past which a threshold on their output is e^T on the length
_LOGS = frozenset({"Log", "Asinh", "Acosh"})
_SATURATING = frozenset({"Sigmoid", "Tanh", "Erf"})
#: functions of a length whose thresholds no constant bounds (periodic, or approaching a limit slowly)
_UNBOUNDED = frozenset({"Cos", "Sin", "Tan", "Asin", "Acos", "Atan", "Atanh", "Softsign", "HardSigmoid"})


def _passes_value(node: gs.Node, index: int) -> bool:
    """True when input ``index`` of ``node`` reaches its output only scaled or moved (no threshold)."""
    if node.op in _DATA_ONLY:
        return index == 0
    if node.op in ("Mul", "Concat", "MatMul"):
        return True
    if node.op in _SMOOTH:
        return True
    if node.op == "Div":  # a float quotient scales its numerator (an integer one rounds: a threshold)
        return index == 0 and node.outputs[0].dtype is not None and np.dtype(node.outputs[0].dtype).kind == "f"
    if node.op == "Where":
        return index in (1, 2)
    if node.op == "Cast":
        return int(node.attrs.get("to", 0)) in _FLOAT_TYPES
    return False


def structural_constants(nodes: list[gs.Node], output: gs.Tensor) -> list[gs.Constant]:
    """The constant uses (one entry per node input) of ``nodes`` that are not value-side (see module doc)."""
    return [t for node, i in _structural_uses(nodes, _clean(nodes, output))
            if isinstance(t := node.inputs[i], gs.Constant)]


def _clean(nodes: list[gs.Node], output: gs.Tensor) -> dict[int, bool]:
    """id(node) -> every output of the node reaches ``output`` value-side only."""
    members = {id(n) for n in nodes}
    clean: dict[int, bool] = {}
    for node in reversed(nodes):  # graph order: every consumer of a node's outputs is already decided
        clean[id(node)] = all(_value_side(o, output, members, clean) for o in node.outputs if o.name)
    return clean


def _structural_uses(nodes: list[gs.Node], clean: dict[int, bool]) -> list[tuple[gs.Node, int]]:
    """(node, input index) of every input of ``nodes`` that is not value-side."""
    return [(node, i) for node in nodes for i, t in enumerate(node.inputs)
            if t.name and not (clean[id(node)] and _passes_value(node, i))]


def _value_side(tensor: gs.Tensor, output: gs.Tensor, members: set[int], clean: dict[int, bool]) -> bool:
    """``tensor`` reaches ``output`` only scaled or moved, through every consumer inside the computation."""
    consumers = [c for c in tensor.outputs if id(c) in members]
    return all(clean.get(id(c), False) and all(_passes_value(c, i) for i, t in enumerate(c.inputs) if t is tensor)
               for c in consumers)


def threshold_bound(constants: Iterable[gs.Constant | np.ndarray]) -> float:
    """The largest threshold one product/quotient chain of these constant uses can make (see module doc)."""
    bound = 1.0
    for constant in constants:
        values = constant if isinstance(constant, np.ndarray) else constant_values(constant)
        bound = min(bound * _factor(values), BOUND_CAP)
    return bound


def _factor(values: Any) -> float:
    """``max(|c|, 1/|c|)`` over the finite nonzero numbers of ``values`` (1 when there are none)."""
    values = np.asarray(values)
    if values.dtype.kind not in "iuf" or not values.size:
        return 1.0
    flat = np.abs(values.astype(np.float64).reshape(-1))
    flat = flat[np.isfinite(flat) & (flat > 0)]
    return max(float(flat.max()), float(1.0 / flat.min())) if flat.size else 1.0


def computed_constants(probes: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """The tensors with the same shape and values in every one of ``probes`` (a computation's tensors by name,
    each at another size: :data:`PROBES`): computed from constants and static dims only. Fewer than two
    probes: none."""
    if len(probes) < 2:
        return {}
    first, *rest = probes
    return {name: value for name, value in first.items()
            if isinstance(value, np.ndarray) and all(_same(value, other.get(name)) for other in rest)}


def _same(a: np.ndarray, b: Any) -> bool:
    if not isinstance(b, np.ndarray) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def length_bound(nodes: list[gs.Node], output: gs.Tensor, probes: Sequence[Mapping[str, Any]] = ()) -> float:
    """The bound ``M`` of the module doc for the computation ``nodes`` of ``output``: the product of the factors
    of its structural constants, the graph's and the computed ones (from ``probes``, see
    :func:`computed_constants`) where they meet a length, raised for the functions of a length that grow slower
    than it. NotProven for a function of a length whose thresholds no constant bounds."""
    clean = _clean(nodes, output)
    fixed = _Fixed(computed_constants(probes))
    bound = 1.0
    for node, index in _structural_uses(nodes, clean):
        tensor = node.inputs[index]
        if isinstance(tensor, gs.Constant) or (fixed(tensor) and not all(fixed(t) for t in node.inputs if t.name)):
            bound = min(bound * _use_factor(node, index, fixed), BOUND_CAP)
    for node in nodes:  # a value ConstantOfShape spreads over a shape
        if node.op == "ConstantOfShape" and not clean[id(node)] and node.attrs.get("value") is not None:
            bound = min(bound * _factor(np.asarray(getattr(node.attrs["value"], "values", node.attrs["value"]))),
                        BOUND_CAP)
    return _amplified(bound, [n for n in nodes if not clean[id(n)]], fixed)


class _Fixed:
    """Which tensors of a computation do not depend on the sizes (graph constants, computed constants), and
    their values."""

    def __init__(self, computed: dict[str, np.ndarray]) -> None:
        self.computed = computed

    def __call__(self, tensor: gs.Tensor) -> bool:
        return isinstance(tensor, gs.Constant) or tensor.name in self.computed

    def value(self, tensor: gs.Tensor) -> np.ndarray:
        return np.asarray(constant_values(tensor) if isinstance(tensor, gs.Constant) else self.computed[tensor.name])


def _use_factor(node: gs.Node, index: int, fixed: _Fixed) -> float:
    """What one structural use of a fixed tensor multiplies the bound by."""
    values = fixed.value(node.inputs[index])
    if node.op == "BitShift" and index == 1 and values.size:  # n >> 8 crosses 1 at 256
        return float(2.0 ** min(float(np.max(np.abs(values))), 60.0))
    if node.op == "Pow" and index == 0 and not fixed(node.inputs[1]):  # c ** n crosses T at n = ln T / ln c
        with np.errstate(divide="ignore", invalid="ignore"):
            return _factor(np.log(np.abs(values.astype(np.float64))))
    return _factor(values)


def _amplified(bound: float, structural: list[gs.Node], fixed: _Fixed) -> float:
    """``bound`` raised for the functions of a length among the ``structural`` nodes that grow slower than it: a
    threshold T on ``Sqrt(n)`` is one of T^2 on n, on ``Pow(n, e)`` T^(1/e), on ``Log(n)`` e^T, on Sigmoid/Tanh/Erf
    at most :data:`SATURATION` times T; NotProven for one that no constant bounds (periodic functions, ...)."""
    power, logs = 1.0, 0
    for node in structural:
        if not node.inputs or fixed(node.inputs[0]):
            continue
        if node.op in _UNBOUNDED:
            raise NotProven(f"the computation takes {node.op} of a size: no constant bounds where it crosses a "
                            "threshold")
        if node.op == "Sqrt":
            power *= 2.0
        elif node.op == "Pow":
            power *= _root(node, fixed)
        elif node.op in _LOGS:
            logs += 1
        elif node.op in _SATURATING:
            bound *= SATURATION
    bound = min(bound, BOUND_CAP) ** power if bound < BOUND_CAP ** (1 / power) else BOUND_CAP
    for _ in range(logs):
        bound = math.exp(bound) if bound < math.log(BOUND_CAP) else BOUND_CAP
    return min(bound, BOUND_CAP)


def _root(node: gs.Node, fixed: _Fixed) -> float:
    """How ``Pow(n, e)`` of a length ``n`` raises a threshold's power: 1/e for an exponent below 1."""
    if len(node.inputs) < 2 or not fixed(node.inputs[1]):
        raise NotProven("the computation raises a size to a power that depends on a size")
    exponents = np.abs(fixed.value(node.inputs[1]).astype(np.float64).reshape(-1))
    exponents = exponents[np.isfinite(exponents) & (exponents > 0)]
    return max(1.0, 1.0 / float(exponents.min())) if exponents.size else 1.0


def table_lengths(nodes: list[gs.Node]) -> set[int]:
    """The largest dim of every constant table (more than 16 values) of ``nodes``: a computation that slices
    a table by the length reads all of it at that length, and nothing new beyond it."""
    return {max(t.shape) for n in nodes for t in n.inputs
            if isinstance(t, gs.Constant) and t.shape is not None and int(np.prod(t.shape)) > 16}


def proof_lengths(bound: float, batch: int | None, what: str, tables: Iterable[int] = (),
                  limit: int | None = None) -> list[tuple[int, int]]:
    """(length, batch) pairs to run a proof at: :data:`BASE_LENGTHS`, ``M + 2`` and ``2M + 3`` for the bound
    ``M``, and the ``tables``' lengths, with ``batch`` (None: 2, and 1 for long lengths; then also batch
    ``M + 2`` and ``2M + 3`` at the shortest length, for a threshold on the batch index); none past ``limit``,
    the longest length the model can run (then ``limit`` itself). NotProven when a length is too long or too
    large."""
    top = math.ceil(bound)
    lengths = sorted({*BASE_LENGTHS, top + 2, 2 * top + 3, *([limit] if limit is not None else [])})
    tables = [t for t in tables if limit is None or t <= limit]
    if limit is not None:
        lengths = [n for n in lengths if n <= limit]
    if lengths[-1] > MAX_LENGTH:
        raise NotProven(f"{what} has constants that allow a length threshold up to {top}: proving it needs "
                        f"length {lengths[-1]} > {MAX_LENGTH}")
    longest = max(tables, default=0)
    if longest > MAX_LENGTH:
        raise NotProven(f"{what} reads a constant table of {longest} rows: proving it needs that length, "
                        f"> {MAX_LENGTH}")
    lengths = sorted({*lengths, *tables})
    pairs = [(n, batch if batch is not None else 2 if n <= LONG_LENGTH else 1) for n in lengths]
    if batch is None:
        pairs += [(BASE_LENGTHS[0], rows) for rows in sorted({top + 2, 2 * top + 3} - {2})]
    for length, rows in pairs:
        if rows * length * length * 8 > MAX_BYTES:
            raise NotProven(f"{what} has constants that allow a length threshold up to {top}: proving it "
                            f"needs length {length} (over {MAX_BYTES >> 20} MB)")
    return pairs


def runnable_limit(tables: Iterable[int], needed: int, fits: Callable[[int], bool]) -> int | None:
    """The length of the shortest of ``tables`` shorter than ``needed`` past whose end the model cannot run
    (``fits(length)`` false one past it: a slice of the table ends, a lookup is out of range), else None."""
    for table in sorted(set(tables)):
        if table >= needed:
            break
        if not fits(table + 1):
            logger.debug("the model cannot run past the %d rows of a table", table)
            return table
    return None


@dataclass(frozen=True)
class Side:
    """A side computation to prove: its nodes (graph order), the inputs its submodel reads (values and shapes),
    the tensor it computes, the model's opset and what reasons call it."""

    nodes: list[gs.Node]
    inputs: list[gs.Variable]
    output: gs.Tensor
    opset: int
    what: str


Feeds = Callable[[int, int], dict[str, np.ndarray]]


def plan_lengths(side: Side, batch: int | None, feeds: Feeds, fits: Callable[[int], bool]) -> list[tuple[int, int]]:
    """The (length, batch) pairs that prove ``side`` (:func:`proof_lengths`): its bound from its constants and
    computed constants (``feeds(batch, length)`` gives its inputs at :data:`PROBES`), its tables, and the
    longest length the model can run (``fits(length)``: it can at that length, batch 1). NotProven: refused."""
    bound = length_bound(side.nodes, side.output, probe_values(side, batch, feeds))
    tables = table_lengths(side.nodes)
    needed = max(BASE_LENGTHS[-1], 2 * math.ceil(bound) + 3)
    return proof_lengths(bound, batch, side.what, tables, runnable_limit(tables, needed, fits))


def probe_values(side: Side, batch: int | None, feeds: Feeds) -> list[dict[str, Any]]:
    """Every tensor of ``side`` (its inputs too) at each of :data:`PROBES` at which it can be computed (``batch``
    fixed: at that batch); NotProven when fewer than two are left (its computed constants would be unknown)."""
    named = list({id(t): t for n in side.nodes for t in n.outputs if t.name}.values())
    evaluate = outputs_evaluator(submodel(side.opset, side.nodes, side.inputs, named), side.what)
    found, reason = [], ""
    for rows, length in PROBES:
        inputs = feeds(batch or rows, length)
        try:
            found.append({**inputs, **evaluate(inputs)})
        except NotProven as exc:
            reason = str(exc)
            logger.debug("%s: cannot be computed at batch %d, length %d (%s)", side.what, batch or rows, length, exc)
    if len(found) < 2:
        raise NotProven(f"{side.what} cannot be computed at the sizes that tell its computed constants "
                        f"({[n for _, n in PROBES]}): {reason}")
    return found


def foreign_dims(tensors: Iterable[gs.Variable], names: Iterable[str]) -> str | None:
    """Why a tensor read for its shape has a dim the proof cannot sweep (named, but none of ``names``)."""
    known = set(names)
    for tensor in tensors:
        for dim in tensor.shape or ():
            if isinstance(dim, str) and dim not in known and not dim.startswith("unk__"):
                return f"reads the shape of '{tensor.name}', whose dim '{dim}' is not the mask's"
    return None


def values_by_length(graph: gs.Graph, opset: int, tensor: gs.Tensor, what: str, reference: Sequence[Any],
                     sequence_axis: int, value_axis: int | None = None) -> list[tuple[int, np.ndarray]]:
    """(length, value) of ``tensor``, computed from constants and shapes only (else NotProven), with the
    ``reference`` shape's ``sequence_axis`` at each length of :func:`plan_lengths`
    (or its fixed size) and its other symbolic dims at 2 (1 for long lengths); tensors read for their shape
    follow the reference's dim names, else its axes (a dim named otherwise: NotProven).

    With ``value_axis`` (the value's axis that the model broadcasts against the sequence), a length at which
    the computation fails, or that axis is neither the length nor 1, is left out: the model cannot run there
    either (a sliced table ends). At least one length must be left."""
    found = computation(graph, tensor, what)
    if found.value_inputs:
        raise NotProven(f"{what} depends on the values of '{found.value_inputs[0].name}'")
    foreign = foreign_dims(found.shape_inputs, [d for d in reference if isinstance(d, str)])
    if foreign:
        raise NotProven(f"{what} {foreign}")
    evaluate = evaluator(submodel(opset, found.nodes, found.shape_inputs, tensor), what)

    def feeds(batch: int, length: int) -> dict[str, np.ndarray]:
        dims = tuple(length if axis == sequence_axis else d if isinstance(d, int) else batch
                     for axis, d in enumerate(reference))
        sizes = {d: size for d, size in zip(reference, dims, strict=True) if isinstance(d, str)}
        return {t.name: stand_in(t, sizes, dims) for t in found.shape_inputs}

    def unfit(length: int, batch: int) -> str | None:
        try:
            value = evaluate(feeds(batch, length))
        except NotProven as exc:
            if value_axis is None:
                raise
            return str(exc)
        results[length] = value
        return runs_at(value, length, (value_axis,)) if value_axis is not None else None

    results: dict[int, np.ndarray] = {}
    sequence = reference[sequence_axis]
    if isinstance(sequence, int):
        plan: list[tuple[int, int]] = [(sequence, 2)]
    else:
        side = Side(found.nodes, found.shape_inputs, tensor, opset, what)
        plan = plan_lengths(side, None, feeds, lambda length: unfit(length, 1) is None)
    kept, reason = [], None
    for length, batch in plan:
        reason = unfit(length, batch)
        if reason is not None:  # the model cannot run at this length either (a sliced table ends)
            logger.debug("%s: the model cannot run at length %d (%s)", what, length, reason)
            continue
        kept.append((length, results[length]))
    if not kept:
        raise NotProven(f"{what} fits no tested sequence length ({[n for n, _ in plan]}): {reason}")
    return kept


def runs_at(value: np.ndarray, length: int, axes: Sequence[int]) -> str | None:
    """Why a model whose side computation gave ``value`` cannot run at ``length``: one of its ``axes`` that the
    model broadcasts against the sequence is neither the length nor 1 (None: it can)."""
    for axis in axes:
        if -value.ndim <= axis < value.ndim and value.shape[axis] not in (length, 1):
            return f"its axis {axis} has {value.shape[axis]} entries"
    return None
