"""The input size sets validation runs: the sample, a small one and a long one.

One input size proves nothing about masks or shape-dependent rewrites (a sliding-window mask fused into plain
causal attention agrees at sequence 16 and differs at 40), so the original and the candidate run on several
sets of input shapes, derived from the first (the *sample*: the user's ``--inputs``, or the generated shapes):

* ``small``: batch-like dims 1, sequence-like dims :data:`SMALL_SEQUENCE`;
* ``long``: sequence-like dims ``max(4 * sample, LONG_MIN)``; batch-like dims as in the sample.

Dims the model fixes stay fixed, dims the user fixed (``--input-shape``) stay as given, dims that share a
symbolic name move together. Spatial dims (the dynamic dims of an input of rank >= 4, or named like
``height``/``width``) keep the sample size in every set: an image at 4x the size costs 16x. A set whose shapes
equal an earlier set's is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass

from gsrewrite.errors import InputDataError
from gsrewrite.validation.dims import LONG_PAST, PREFILL_TOKENS, InputDims
from gsrewrite.validation.shapes import default_dim
from gsrewrite.validation.signature import InputSpec

#: Size of sequence-like dims in the small set.
SMALL_SEQUENCE = 3
#: Smallest size of sequence-like dims in the long set (else 4x the sample).
LONG_MIN = 64
#: New tokens of a decoder's ``chunk`` set (over the sample's past, at its batch).
CHUNK_TOKENS = 4
_SPATIAL_WORDS = ("height", "width")
_SEQUENCE_WORDS = ("seq", "len", "time", "step", "token", "past", "total")

Shapes = dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class SizeSet:
    """One set of concrete input shapes: ``name`` is ``sample``, ``small`` or ``long`` (a decoder's:
    ``decode``, ``prefill``, ``long past``); ``bindings``: the sizes of the free dim symbols, when known."""

    name: str
    shapes: Shapes
    bindings: Mapping[str, int] | None = None
    #: the first position of position inputs (a decoder's past length)
    positions_start: int = 0

    def describe(self) -> str:
        """``long (input_ids 2x64, attention_mask 2x64)``, for messages."""
        shapes = ", ".join(f"{name} {'x'.join(map(str, shape)) or 'scalar'}" for name, shape in self.shapes.items())
        return f"{self.name} ({shapes})"


def size_sets(specs: Sequence[InputSpec], sample: Shapes, fixed: Container[str] | None = None
              ) -> list[SizeSet]:
    """The sample, then the small and the long set (those that differ from the sets before them).

    ``fixed``: the user's input shapes (``{"input_ids": (1, 128)}`` or ``{"sequence": 64}``, or the parsed
    ``--input-shape``): the dims they name keep their sample size.
    """
    fixed = fixed or {}
    roles = _roles(specs)
    sets = [SizeSet("sample", dict(sample))]
    for name, scale in (("small", _small), ("long", _long)):
        shapes = {spec.name: _scaled(spec, sample[spec.name], fixed, roles, scale) for spec in specs}
        if all(shapes != s.shapes for s in sets):
            sets.append(SizeSet(name, shapes))
    return sets


def related_size_sets(dims: InputDims, sample: Mapping[str, int], contracts: Container[str] = ()) -> list[SizeSet]:
    """The size sets of :func:`size_sets` for dims the graph relates (:class:`InputDims`), scaled symbol by
    symbol so that derived dims follow (a decoder's mask stays past + new tokens). A decoder gets its own sets:
    the sample (a decode step), a prefill (no past, :data:`PREFILL_TOKENS` new tokens), a chunk
    (:data:`CHUNK_TOKENS` new tokens over the sample's past, at its batch) and a long past (:data:`LONG_PAST`,
    within the model's position tables). Sets the dims cannot take are left out. ``contracts``: input contracts the
    user accepted (``batch1-chunks``: the chunk set runs at batch 1; ``unpadded-prompts``: the prefill does)."""
    fixed = dims.fixed
    if dims.is_decoder:
        new = dims.new_tokens
        past = [name for name, role in dims.roles.items() if role == "past" and name in sample]
        prefill = {**sample, **{n: 0 for n in past if n not in fixed},
                   **{n: PREFILL_TOKENS for n in new if n not in fixed}}
        # several new tokens over a past at the sample's batch (2): chunked prefill, speculative decoding, a
        # multi-turn chat's next prompt; kernels that take one new token or batch 1 only are caught here
        chunk = {**sample, **{n: CHUNK_TOKENS for n in new if n not in fixed}}
        for accepted, narrowed in (("batch1-chunks", chunk), ("unpadded-prompts", prefill)):
            if accepted in contracts:
                narrowed.update({n: 1 for n, role in dims.roles.items()
                                 if role == "batch" and n in narrowed and n not in fixed})
        long = {**sample, **{n: 1 for n in new if n not in fixed}, **{n: 0 for n in past if n not in fixed}}
        limit = _past_limit(dims, long)
        longest = LONG_PAST if limit is None else max(0, min(LONG_PAST, limit // max(len(past), 1)))
        long.update({n: longest for n in past if n not in fixed})
        candidates = [("decode", dict(sample)), ("prefill", prefill), ("chunk", chunk), ("long past", long)]
    else:
        small = {n: v if n in fixed else _small(dims.roles.get(n, "sequence"), v) for n, v in sample.items()}
        long = {n: v if n in fixed else _long(dims.roles.get(n, "sequence"), v) for n, v in sample.items()}
        candidates = [("sample", dict(sample)), ("small", small), ("long", long)]
    sets: list[SizeSet] = []
    for name, bindings in candidates:
        try:
            shapes = dims.shapes(bindings)
        except InputDataError:
            continue
        if all(shapes != s.shapes for s in sets):
            sets.append(SizeSet(name, shapes, bindings, dims.positions_start(bindings)))
    return sets


def shorter_pasts(dims: InputDims | None, size: SizeSet, sample: SizeSet) -> list[SizeSet]:
    """For a decoder's long past set: the same with the past halved, then halved again, while longer than the
    sample's (the model may index a table by position that ends before :data:`LONG_PAST`)."""
    if dims is None or size.name != "long past" or size.bindings is None or sample.bindings is None:
        return []
    past = [n for n, role in dims.roles.items() if role == "past" and n in size.bindings]
    shorter: list[SizeSet] = []
    bindings = dict(size.bindings)
    while past and all(bindings[n] // 2 > sample.bindings.get(n, 0) for n in past):
        bindings = {**bindings, **{n: bindings[n] // 2 for n in past}}
        try:
            shorter.append(SizeSet(size.name, dims.shapes(bindings), dict(bindings), dims.positions_start(bindings)))
        except InputDataError:
            break
    return shorter


def _past_limit(dims: InputDims, no_past: Mapping[str, int]) -> int | None:
    """The longest past the position tables allow (positions start at the past length): the smallest table's
    rows less the new tokens; None without a table (or when the inputs cannot take these sizes)."""
    try:
        shapes = dims.shapes(no_past)
    except InputDataError:
        return None
    room = [rows - (shapes[name][-1] if shapes[name] else 1) for name, rows in dims.position_rows.items() if rows]
    return min(room) if room else None


def _roles(specs: Sequence[InputSpec]) -> dict[str, str]:
    """The role of every symbolic dim name, from its first use (a name moves as one)."""
    roles: dict[str, str] = {}
    for spec in specs:
        for position, dim in enumerate(spec.dims or ()):
            if isinstance(dim, str) and dim not in roles:
                roles[dim] = dim_role(dim, position, len(spec.dims or ()))
    return roles


def _scaled(spec: InputSpec, shape: tuple[int, ...], fixed: Container[str], roles: dict[str, str],
            scale: Callable[[str, int], int]) -> tuple[int, ...]:
    if spec.dims is None or spec.name in fixed or len(spec.dims) != len(shape):
        return shape
    out = []
    for position, (dim, size) in enumerate(zip(spec.dims, shape, strict=True)):
        if isinstance(dim, int) or (isinstance(dim, str) and dim in fixed):
            out.append(size)
        else:
            role = roles[dim] if isinstance(dim, str) else dim_role(dim, position, len(shape))
            out.append(scale(role, size))
    return tuple(out)


def dim_role(name: str | None, position: int, rank: int) -> str:
    """``batch``, ``sequence`` or ``spatial``: how a dynamic dim is scaled across the size sets."""
    lowered = (name or "").lower()
    if default_dim(name, position, rank, other=0) != 0:
        return "batch"
    if any(word in lowered for word in _SEQUENCE_WORDS):
        return "sequence"
    if rank >= 4 or any(word in lowered for word in _SPATIAL_WORDS):
        return "spatial"
    return "sequence"


def _small(role: str, size: int) -> int:
    if role == "batch":
        return 1
    return SMALL_SEQUENCE if role == "sequence" else size


def _long(role: str, size: int) -> int:
    return max(4 * size, LONG_MIN) if role == "sequence" else size


def symbols_consistent(specs: Sequence[InputSpec], shapes: Shapes) -> bool:
    """True when every symbolic dim name has one size across the inputs (given inputs may break that)."""
    seen: dict[str, int] = {}
    for spec in specs:
        for dim, size in zip(spec.dims or (), shapes.get(spec.name, ()), strict=False):
            if isinstance(dim, str) and seen.setdefault(dim, size) != size:
                return False
    return True
