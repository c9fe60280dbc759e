"""The sizes of a model's input dims, as the model needs them: one place that decides the shapes of generated
inputs (validation, bench, ``shapes --check``, extract, calibration).

Dims are symbols (``batch``, ``sequence``), expressions the model declares (``past_sequence + sequence``) or
unnamed. Some follow from others (:mod:`gsrewrite.shapes.dim_relations`: a decoder's ``attention_mask`` spans the
past and the new tokens); only the free symbols get sizes, by role:

* ``batch``: the name says batch, or the first dim of an input of rank >= 2 (not named like a sequence): 2;
* ``past``: the cache length of a decoder (named ``past``/``cache`` and added to another input dim somewhere in
  the graph, ``past_sequence + sequence``);
* ``spatial``: named ``height``/``width``, or a dynamic dim of an input of rank >= 4: kept at the sample size;
* ``sequence``: every other dim: 16 (or the size the caller grows it to).

A decoder (a model with a ``past`` dim) is sized as it runs: the sample is a decode step (1 new token over a
past of 16), then a prefill (no past, 16 tokens) and a long past (:data:`LONG_PAST`, within the tables the model
indexes by position). Other models get the sample, a small and a long set (:mod:`gsrewrite.validation.sizes`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from gsrewrite.errors import InputDataError
from gsrewrite.shapes import symdim
from gsrewrite.shapes.dim_relations import DimSolution, solve_input_dims, substitute, with_relation
from gsrewrite.shapes.input_shapes import as_input_shapes, check_names
from gsrewrite.shapes.symdim import DimValue
from gsrewrite.validation.index_bounds import gather_index_bounds
from gsrewrite.validation.memory import MemoryBudgetError, budget_in_force, format_bytes
from gsrewrite.validation.shapes import BATCH_DEFAULT, OTHER_DEFAULT, ShapeSpec, default_dim
from gsrewrite.validation.signature import InputSpec, model_inputs

log = logging.getLogger(__name__)

#: Past length of a decoder's long input set (at most what its position tables hold).
LONG_PAST = 256
#: New tokens of a decoder's prefill set.
PREFILL_TOKENS = OTHER_DEFAULT
_PAST_WORDS = ("past", "cache")
_SEQUENCE_WORDS = ("seq", "len", "time", "step", "token", "total")
_SPATIAL_WORDS = ("height", "width")

Shapes = dict[str, tuple[int, ...]]


@dataclass
class InputDims:
    """A model's input dims: parsed, related, with a role per free symbol (see the module docstring)."""

    specs: list[InputSpec]
    #: input -> its dims (ints, expressions in the free symbols, or anonymous symbols ``input:axis``)
    dims: dict[str, list[DimValue]]
    solution: DimSolution
    roles: dict[str, str]
    #: symbols the caller fixed (``sequence=128``, or read off a whole input shape)
    fixed: dict[str, int] = field(default_factory=dict)
    #: inputs whose whole shape the caller gave
    whole: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: position-like integer inputs -> the rows of the table they index (positions must stay below)
    position_rows: dict[str, int | None] = field(default_factory=dict)

    @property
    def is_decoder(self) -> bool:
        """A model with a cache: some free symbol is a past length."""
        return any(role == "past" for name, role in self.roles.items() if name in self.solution.free)

    @property
    def new_tokens(self) -> set[str]:
        """A decoder's new-token symbols: those added to a past length somewhere (``past + sequence``)."""
        past = {name for name, role in self.roles.items() if role == "past"}
        return {name for total in self.solution.sums if total.symbols() & past
                for name in total.symbols() - past if name in self.solution.free}

    def sample_bindings(self, other: int = OTHER_DEFAULT) -> dict[str, int]:
        """A size for every free symbol: fixed ones as given, batch-like 2, others ``other``; a decoder's sample
        is a decode step: 1 new token over a past of ``other``; none below what the graph's ops accept
        (``solution.minimums``)."""
        new = self.new_tokens if self.is_decoder else set()
        out = {}
        for name in self.solution.free:
            role = self.roles.get(name, "sequence")
            if name in self.fixed:
                out[name] = self.fixed[name]
            else:  # at least what the graph's ops accept (a reflect Pad's length: shapes/dim_minimums.py)
                size = BATCH_DEFAULT if role == "batch" else 1 if name in new else other
                out[name] = max(size, self.solution.minimums.get(name, 0))
        return out

    def sample(self, other: int = OTHER_DEFAULT) -> Shapes:
        """The inputs' shapes at :meth:`sample_bindings`."""
        return self.shapes(self.sample_bindings(other))

    def shapes(self, bindings: Mapping[str, int]) -> Shapes:
        """Every input's shape with the free symbols bound; raises :class:`InputDataError` when a dim comes out
        negative or contradicts a shape the caller gave."""
        shapes: Shapes = {}
        for spec in self.specs:
            dims = self.dims[spec.name]
            try:
                shape = tuple(symdim.evaluate(d, bindings) for d in dims)
            except KeyError as exc:
                raise InputDataError(f"no size for dim {exc.args[0]!r} of input {spec.name!r}") from None
            if any(d < 0 for d in shape):
                raise InputDataError(f"input {spec.name!r} would have the negative shape {list(shape)} "
                                     f"({', '.join(self.solution.describe())})")
            given = self.whole.get(spec.name)
            if given is not None and given != shape:
                raise InputDataError(f"shape {list(given)} given for {spec.describe()} contradicts the other inputs "
                                     f"(the graph ties {'; '.join(self.solution.describe()) or 'their dims'})")
            shapes[spec.name] = shape
        return shapes

    def bindings_of(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, int] | None:
        """The free symbols' sizes read off concrete shapes (given inputs), or None when they do not fit the
        dims (a symbol with two sizes, a derived dim that disagrees)."""
        bound: dict[str, int] = {}
        for spec in self.specs:
            shape = shapes.get(spec.name)
            dims = self.dims[spec.name]
            if shape is None or len(shape) != len(dims):
                return None
            for dim, size in zip(dims, shape, strict=True):
                name = symdim.symbol_name(dim)
                if name is not None and bound.setdefault(name, int(size)) != int(size):
                    return None
        try:
            return bound if self.shapes(bound) == {k: tuple(v) for k, v in shapes.items()} else None
        except InputDataError:
            return None

    def with_suggestion(self, index: int) -> InputDims | None:
        """These dims with the ``index``-th relation the graph suggests solved in (None: none left)."""
        if index >= len(self.solution.suggested):
            return None
        left, right = self.solution.suggested[index]
        solved = with_relation(self.solution, left, right)
        if solved is None:
            return None
        return _make(self.specs, self.dims, solved, self.fixed, self.whole, self.position_rows)

    def variants(self) -> list[InputDims]:
        """These dims with each relation the graph only suggests solved in (a decoder's mask over its past and
        new tokens, most likely first), then as they are: the order in which to try them."""
        found = [d for d in (self.with_suggestion(i) for i in range(len(self.solution.suggested))) if d is not None]
        return [*found, self]

    def positions_start(self, bindings: Mapping[str, int]) -> int:
        """Where a decoder's new tokens start: the past length (0 for other models)."""
        return sum(size for name, size in bindings.items() if self.roles.get(name) == "past")



def input_dims(model: onnx.ModelProto, input_shapes: ShapeSpec | None = None,
               specs: Sequence[InputSpec] | None = None) -> InputDims:
    """The input dims of ``model``, related by its graph, with the caller's shapes (``{"input_ids": (1, 128)}``
    or ``{"batch": 1}``) fixed."""
    specs = _unbuffered(model, list(specs if specs is not None else model_inputs(model)))
    raw = {spec.name: _parse(spec) for spec in specs}
    fixed, whole = _user_bindings(specs, raw, input_shapes)
    solution = solve_input_dims(model, fixed)
    positions = {s.name: s.dtype for s in specs if s.dtype.kind in "iu" and _is_position(s.name)}
    bounds = gather_index_bounds(model.graph, list(positions)) if positions else {}
    # positions stay below the table they index and within their type (a uint8 position holds 0..255)
    rows: dict[str, int | None] = {name: min(bounds.get(name, 2**63), int(np.iinfo(dtype).max) + 1)
                                   for name, dtype in positions.items()}
    dims = _make(specs, raw, solution, fixed, whole, rows)
    if fixed:
        _check_given_sizes(dims)
    return dims


def _unbuffered(model: onnx.ModelProto, specs: list[InputSpec]) -> list[InputSpec]:
    """A model rewritten under ``shared-kv-buffer`` (its past dims named :data:`~gsrewrite.contracts.BUFFER_DIM`)
    sized as before it: the past as long as the mask says beyond the new tokens (``past_sequence`` of a mask of
    ``past_sequence + sequence``). A past buffer of that length is what the buffer holds when it is full, and the
    dims keep the decoder's roles (decode steps, prompts, chunks) instead of an unrelated length."""
    from gsrewrite.contracts import BUFFER_DIM, stated

    buffered = [s for s in specs if s.dims and len(s.dims) == 4 and s.dims[2] == BUFFER_DIM]
    if not buffered or "shared-kv-buffer" not in stated(model):
        return specs
    new = {s.dims[-1] for s in specs if s.dims and len(s.dims) == 2 and isinstance(s.dims[-1], str)
           and symdim.symbol_name(symdim.from_dim_param(s.dims[-1])) is not None}  # plain symbols: token counts
    past = None
    for spec in specs:  # the mask: past + new tokens, as symdim reads its dim (one symbol left beyond the new one)
        last = spec.dims[-1] if spec.dims and len(spec.dims) == 2 else None
        if isinstance(last, str) and last not in new:
            for name in new:
                rest = symdim.symbol_name(symdim.sub(symdim.from_dim_param(last), symdim.sym(name)))
                past = rest if rest is not None and rest not in new else past
    if past is None:
        return specs
    return [InputSpec(s.name, s.elem_type, (*s.dims[:2], past, *s.dims[3:])) if s in buffered and s.dims else s
            for s in specs]


def _check_given_sizes(dims: InputDims) -> None:
    """:class:`MemoryBudgetError` when the sizes the caller gave make one input larger than the memory budget
    whatever the other dims get (counted at their smallest: 1, a past 0): one line before any input set is
    planned, rather than a warning per size set."""
    budget = budget_in_force()
    smallest = {name: dims.fixed.get(name, 0 if dims.roles.get(name) == "past" else 1)
                for name in dims.solution.free}
    for spec in dims.specs:
        if not any(symdim.symbols(d) & dims.fixed.keys() for d in dims.dims[spec.name]):
            continue  # sized by the model alone: the estimate of the whole run says more (its largest tensor)
        try:
            itemsize = spec.dtype.itemsize or 1
            sizes = [max(symdim.evaluate(d, smallest), 0) for d in dims.dims[spec.name]]
        except (InputDataError, KeyError):
            continue
        nbytes = math.prod(sizes) * itemsize
        if nbytes > budget:
            given = ", ".join(f"{name}={size}" for name, size in dims.fixed.items() if size in sizes)
            raise MemoryBudgetError(
                f"input {spec.name!r} [{', '.join(map(str, sizes))}] takes at least {format_bytes(nbytes)}"
                f"{f' with {given}' if given else ''}, over the memory budget of {format_bytes(budget)}; give "
                "smaller sizes with --input-shape")


def _make(specs: list[InputSpec], raw: dict[str, list[DimValue]], solution: DimSolution, fixed: dict[str, int],
          whole: dict[str, tuple[int, ...]], rows: dict[str, int | None]) -> InputDims:
    dims = {name: [substitute(d, solution.derived) for d in shape] for name, shape in raw.items()}
    known = {s for shape in raw.values() for d in shape for s in symdim.symbols(d)}
    solution.free = [s for s in solution.free if s in known] + sorted(
        s for s in known if s not in solution.free and s not in solution.derived)
    roles = _roles(specs, raw, solution)
    return InputDims(specs, dims, solution, roles, fixed, whole, rows)


def _parse(spec: InputSpec) -> list[DimValue]:
    if spec.dims is None:
        raise InputDataError(f"input {spec.name!r} has no shape in the model; give one (--input-shape NAME:1x128)")
    out: list[DimValue] = []
    for axis, dim in enumerate(spec.dims):
        if isinstance(dim, int):
            out.append(dim)
        elif isinstance(dim, str):
            out.append(symdim.from_dim_param(dim))
        else:  # unnamed: a symbol of its own
            out.append(symdim.sym(f"{spec.name}:{axis}"))
    return out


def _user_bindings(specs: Sequence[InputSpec], raw: Mapping[str, list[DimValue]], input_shapes: ShapeSpec | None
                   ) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """Symbols the caller fixed, and the whole shapes given (their bare symbols become fixed too)."""
    given = as_input_shapes(input_shapes)
    declared = {d for s in specs for d in (s.dims or ()) if isinstance(d, str)}
    symbols = {name for shape in raw.values() for d in shape for name in symdim.symbols(d)}
    check_names(given, [s.name for s in specs], symbols | declared)
    fixed = {name: size for name, size in given.bindings.items() if name in symbols or name in declared}
    whole = {name: given.sizes(name) for name in given.shapes}
    for spec in specs:
        shape = whole.get(spec.name)
        if shape is None:
            continue
        declared_dims = raw[spec.name]
        if len(shape) != len(declared_dims):
            raise InputDataError(f"shape {list(shape)} given for {spec.describe()} has the wrong rank")
        for dim, size in zip(declared_dims, shape, strict=True):
            if isinstance(dim, int) and dim != size:
                raise InputDataError(f"size {size} given for {spec.describe()} contradicts its fixed dim {dim}")
            name = symdim.symbol_name(dim)
            if name is not None and fixed.setdefault(name, size) != size:
                raise InputDataError(f"dim {name!r} of input {spec.name!r} is given as both {fixed[name]} "
                                     f"and {size}")
    return fixed, whole


def _roles(specs: Sequence[InputSpec], raw: Mapping[str, list[DimValue]], solution: DimSolution
           ) -> dict[str, str]:
    """The role of every free symbol, from its first use (see the module docstring)."""
    in_sums = {name for total in solution.sums for name in total.symbols()}
    roles: dict[str, str] = {}
    for spec in specs:
        shape = raw[spec.name]
        for position, dim in enumerate(shape):
            name = symdim.symbol_name(dim)
            if name is None or name in roles:
                continue
            declared = spec.dims[position] if spec.dims else None
            lowered = declared.lower() if isinstance(declared, str) else ""
            if any(word in lowered for word in _PAST_WORDS) and name in in_sums:
                roles[name] = "past"
            elif default_dim(lowered or None, position, len(shape), other=0) != 0:
                roles[name] = "batch"
            elif any(word in lowered for word in _SEQUENCE_WORDS):
                roles[name] = "sequence"
            elif len(shape) >= 4 or any(word in lowered for word in _SPATIAL_WORDS):
                roles[name] = "spatial"
            else:
                roles[name] = "sequence"
    return roles


def _is_position(name: str) -> bool:
    return "position" in name.lower()
