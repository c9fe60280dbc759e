"""The sequence lengths a shape-dependent proof runs at, chosen so that no constant threshold can hide.

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
  :func:`threshold_bound` computes it.
* **Tables.** A constant table (a registered causal buffer, position ids, a cos/sin cache) sliced by the
  length can hide anything in its later rows; at the length of its largest dim the computation reads all of
  it (:func:`table_lengths`). Beyond a table's end the model itself cannot run (the slice stops short, the
  shapes no longer broadcast): callers leave out lengths at which the computation fails or its result does not
  have the length (:func:`runs_at`), and need at least one left.
* **The lengths.** :func:`proof_lengths` gives 7, 33, 130 (odd, even-ish, past 128), ``M + 2`` and
  ``2M + 3`` for the bound ``M`` (past the threshold, and past it doubled, for comparisons of doubled
  positions) and the tables' lengths. Above :data:`MAX_LENGTH`, or when a ``[batch, L, L]`` int64 grid at
  such a length would exceed :data:`MAX_BYTES`, the proof is refused (NotProven with the reason) rather than
  weakened. Long lengths use batch 1.
* **The batch.** A threshold can sit on the batch index too (a Range over the batch compared with a
  constant): with a symbolic batch, the shortest length also runs at batch ``M + 2`` and ``2M + 3``.
* **Shape-derived windows** (``seq // 2``, ``seq - 1``) scale with the length, so they already show at the
  base lengths. An input read only for its shape whose dims are not the mask's (declared with another name)
  would be a free size the test cannot sweep: such computations are refused by the callers
  (:func:`foreign_dims`); unnamed dims and dims inference left as ``unk__N`` are taken to be the mask's at the
  same axis, which is what exporters read (the shape of ``input_ids`` or of the hidden states).

Limits. Adding constants (``j - i - 64 - 64 - 64``) is covered too, since each use multiplies the bound (64^3:
refused); float rounding (``(d + 2^32) - 2^32`` is 0 for small ``d``) needs an ``Add`` of a constant, which
is structural (refused). Unseen: a threshold made only of value-side float overflow (``d * 1e36`` becomes inf
past ``d = 340``, with no Add, comparison or Where condition after it) and a stand-in assumption that is wrong
(a dim called ``unk__N`` that is not the mask's). A threshold from a graph input's *value* cannot occur: the
bias may read only the mask's values, position ids and rotary tables no input values at all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import constant_values

from .producers import NotProven, computation, evaluator, stand_in, submodel

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
    members = {id(n) for n in nodes}
    clean: dict[int, bool] = {}  # id(node) -> all its outputs reach ``output`` value-side only
    found: list[gs.Constant] = []
    for node in reversed(nodes):  # graph order: every consumer of a node's outputs is already decided
        clean[id(node)] = all(_value_side(o, output, members, clean) for o in node.outputs if o.name)
        found.extend(t for i, t in enumerate(node.inputs)
                     if isinstance(t, gs.Constant) and not (clean[id(node)] and _passes_value(node, i)))
    return found


def _value_side(tensor: gs.Tensor, output: gs.Tensor, members: set[int], clean: dict[int, bool]) -> bool:
    """``tensor`` reaches ``output`` only scaled or moved, through every consumer inside the computation."""
    consumers = [c for c in tensor.outputs if id(c) in members]
    return all(clean.get(id(c), False) and all(_passes_value(c, i) for i, t in enumerate(c.inputs) if t is tensor)
               for c in consumers)


def threshold_bound(constants: Iterable[gs.Constant]) -> float:
    """The largest threshold one product/quotient chain of these constant uses can make (see module doc)."""
    bound = 1.0
    for constant in constants:
        values = np.asarray(constant_values(constant))
        factor = 1.0
        if values.dtype.kind in "iuf" and values.size:
            flat = np.abs(values.astype(np.float64).reshape(-1))
            flat = flat[np.isfinite(flat) & (flat > 0)]
            if flat.size:
                factor = max(float(flat.max()), float(1.0 / flat.min()))
        bound = min(bound * factor, 1e18)
    return bound


def table_lengths(nodes: list[gs.Node]) -> set[int]:
    """The largest dim of every constant table (more than 16 values) of ``nodes``: a computation that slices
    a table by the length reads all of it at that length, and nothing new beyond it."""
    return {max(t.shape) for n in nodes for t in n.inputs
            if isinstance(t, gs.Constant) and t.shape is not None and int(np.prod(t.shape)) > 16}


def proof_lengths(bound: float, batch: int | None, what: str, tables: Iterable[int] = ()) -> list[tuple[int, int]]:
    """(length, batch) pairs to run a proof at: :data:`BASE_LENGTHS`, ``M + 2`` and ``2M + 3`` for the bound
    ``M``, and the ``tables``' lengths, with ``batch`` (None: 2, and 1 for long lengths; then also batch
    ``M + 2`` and ``2M + 3`` at the shortest length, for a threshold on the batch index). NotProven when a
    length is too long or too large."""
    top = int(np.ceil(bound))
    lengths = sorted({*BASE_LENGTHS, top + 2, 2 * top + 3})
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
    ``reference`` shape's ``sequence_axis`` at each length of :func:`proof_lengths`
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
    sequence = reference[sequence_axis]
    if isinstance(sequence, int):
        plan: list[tuple[int, int | None]] = [(sequence, None)]
    else:
        bound = threshold_bound(structural_constants(found.nodes, tensor))
        plan = list(proof_lengths(bound, None, what, table_lengths(found.nodes)))
    results = []
    reason: str | None = None
    for length, batch in plan:
        dims = tuple(length if axis == sequence_axis else d if isinstance(d, int) else batch or 2
                     for axis, d in enumerate(reference))
        sizes = {d: size for d, size in zip(reference, dims, strict=True) if isinstance(d, str)}
        try:
            value = evaluate({t.name: stand_in(t, sizes, dims) for t in found.shape_inputs})
            reason = runs_at(value, length, (value_axis,)) if value_axis is not None else None
        except NotProven as exc:
            if value_axis is None:
                raise
            reason = str(exc)
        if reason is not None:  # the model cannot run at this length either (a sliced table ends)
            logger.debug("%s: the model cannot run at length %d (%s)", what, length, reason)
            continue
        results.append((length, value))
    if not results:
        raise NotProven(f"{what} fits no tested sequence length ({[n for n, _ in plan]}): {reason}")
    return results


def runs_at(value: np.ndarray, length: int, axes: Sequence[int]) -> str | None:
    """Why a model whose side computation gave ``value`` cannot run at ``length``: one of its ``axes`` that the
    model broadcasts against the sequence is neither the length nor 1 (None: it can)."""
    for axis in axes:
        if -value.ndim <= axis < value.ndim and value.shape[axis] not in (length, 1):
            return f"its axis {axis} has {value.shape[axis]} entries"
    return None
