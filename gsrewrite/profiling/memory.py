"""Activation memory planning: how small one arena holding every intermediate tensor can be.

* **Liveness** over the model's topological order: a tensor lives from the step that produces it to the last
  step that reads it (a control-flow node reading it from inside a subgraph counts).
* **Aliases**: ops that only reinterpret their input (Reshape, Squeeze, Unsqueeze, Flatten, Identity) share its
  buffer, as onnxruntime does; **in-place**: an elementwise op may write into an input of its output's size
  that dies at that op (not a graph input or a constant).
* **Offsets**: greedy placement, each buffer at the lowest offset where no buffer live at the same time
  overlaps it (best fit), tried in two orders (largest first; longest-lived first) keeping the smaller arena.
* **Lower bound**: the largest sum of sizes of buffers live at one step; no placement can do better.

Graph inputs and outputs are kept out of the arena (they are the caller's buffers) and reported apart, as are
the weights. Sizes need concrete dims: symbols are bound from ``--input-shape`` or validation's default sizes.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.errors import UsageError
from gsrewrite.graph.subgraph import outer_reads
from gsrewrite.model_io.graph_walk import may_hold_graphs, node_subgraphs
from gsrewrite.profiling.costs import item_bits
from gsrewrite.shapes import symdim
from gsrewrite.shapes.walk import SymbolicShapes

ALIGNMENT = 64
ALIAS_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
IN_PLACE_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Sqrt", "Abs", "Clip",
    "LeakyRelu", "Gelu", "FastGelu", "BiasGelu", "Softmax", "Cast", "Where", "Pow", "HardSigmoid", "HardSwish",
})


@dataclass
class Buffer:
    tensor: str
    size: int
    start: int
    end: int
    offset: int = -1
    aliases: list[str] = field(default_factory=list)

    def overlaps(self, other: Buffer) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class MemoryPlan:
    naive_bytes: int
    arena_bytes: int
    lower_bound_bytes: int
    peak_step: int
    peak_node: str
    buffers: list[Buffer]
    input_bytes: int
    output_bytes: int
    weight_bytes: int
    bindings: dict[str, int]
    #: intermediate tensors whose size is unknown (a dim no input gives, or an unknown rank): not planned
    unknown: list[str]
    strategy: str
    #: graph inputs and outputs whose size is unknown (not in input_bytes / output_bytes)
    unknown_io: list[str] = field(default_factory=list)
    #: intermediates inside If/Loop/Scan bodies: not planned (the bodies' shapes are not inferred here)
    in_subgraphs: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every tensor is planned; when not, every byte count is a lower bound (the tensors of unknown
        size, and those inside control-flow bodies, are not in them)."""
        return not self.unknown and not self.unknown_io and not self.in_subgraphs

    @property
    def ratio_to_bound(self) -> float:
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "naive_bytes": self.naive_bytes, "arena_bytes": self.arena_bytes,
            "lower_bound_bytes": self.lower_bound_bytes, "arena_over_lower_bound": round(self.ratio_to_bound, 4),
            "peak_step": self.peak_step, "peak_node": self.peak_node, "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes, "weight_bytes": self.weight_bytes, "bindings": self.bindings,
            "strategy": self.strategy, "complete": self.complete, "tensors_with_unknown_size": self.unknown,
            "inputs_outputs_with_unknown_size": self.unknown_io, "tensors_in_subgraphs": self.in_subgraphs,
            "buffers": [{"tensor": b.tensor, "offset": b.offset, "size": b.size, "first_step": b.start,
                         "last_step": b.end, "aliases": b.aliases} for b in self.buffers],
        }


def plan_memory(model: onnx.ModelProto, shapes: SymbolicShapes, bindings: Mapping[str, int]) -> MemoryPlan:
    """Plan the activation arena of ``model`` with the symbols of ``shapes`` bound by ``bindings``."""
    graph = model.graph
    nodes = list(graph.node)
    initializers = {t.name for t in graph.initializer}
    constants = initializers | {n.output[0] for n in nodes if n.op_type == "Constant" and n.output}
    graph_inputs = {i.name for i in graph.input} - initializers
    kept = graph_inputs | constants  # buffers never shared (the caller's, the weights')
    graph_outputs = {o.name for o in graph.output}

    scope = {**shapes.bindings, **bindings}
    sizes: dict[tuple[Any, int], int | None] = {}  # bytes by shape and type: computed once for each

    def size_of(name: str) -> int | None:
        info = shapes.tensors.get(name)
        if info is None or info.shape is None:
            return None
        key = (tuple(info.shape), info.dtype)
        if key not in sizes:
            sizes[key] = _bytes(info.shape, item_bits(info.dtype), scope)
        return sizes[key]

    last_use: dict[str, int] = {}
    for step, node in enumerate(nodes):
        for name in node.input:
            if name:
                last_use[name] = step
        if may_hold_graphs(node):
            for name in outer_reads(node):
                last_use[name] = step
    owner: dict[str, Buffer] = {}  # tensor -> buffer holding it
    buffers: list[Buffer] = []
    unknown: list[str] = []
    alias_bytes = 0  # the views' and in-place outputs' bytes (in the naive total)
    for step, node in enumerate(nodes):
        if node.op_type == "Constant":
            continue
        for index, name in enumerate(node.output):
            if not name or name in graph_outputs:
                continue
            size = size_of(name)
            if size is None:
                unknown.append(name)
                continue
            end = last_use.get(name, step)
            shared = _reusable(node, index, step, size, owner, last_use, kept)
            if shared is not None:
                shared.end = max(shared.end, end)
                shared.aliases.append(name)
                alias_bytes += size
                owner[name] = shared
                continue
            buffer = Buffer(name, size, step, end)
            buffers.append(buffer)
            owner[name] = buffer
    naive = sum(_aligned(b.size) for b in buffers) + alias_bytes
    lower, peak_step = _lower_bound(buffers, len(nodes))
    best = _best_placement(buffers, lower)
    arena, strategy, offsets = best
    for buffer, offset in zip(buffers, offsets, strict=True):
        buffer.offset = offset
    weight_bytes = sum((int(_elements(t.dims)) * item_bits(t.data_type) + 7) // 8 for t in graph.initializer)
    return MemoryPlan(
        naive_bytes=naive, arena_bytes=arena, lower_bound_bytes=lower, peak_step=peak_step,
        peak_node=nodes[peak_step].name if nodes and 0 <= peak_step < len(nodes) else "",
        buffers=buffers, input_bytes=sum(size_of(n) or 0 for n in graph_inputs),
        output_bytes=sum(size_of(n) or 0 for n in graph_outputs), weight_bytes=weight_bytes,
        bindings=dict(bindings), unknown=unknown, strategy=strategy,
        unknown_io=[n for n in (*(i.name for i in graph.input), *(o.name for o in graph.output))
                    if (n in graph_inputs or n in graph_outputs) and size_of(n) is None],
        in_subgraphs=_body_intermediates(nodes))


def _body_intermediates(nodes: list[onnx.NodeProto]) -> list[str]:
    """The tensors the nodes inside ``nodes``' subgraphs (at any depth) compute, but their outputs and constants."""
    names: list[str] = []
    pending = [node for node in nodes if may_hold_graphs(node)]
    while pending:
        node = pending.pop()
        for _, sub in node_subgraphs(node):
            outputs = {o.name for o in sub.output}
            for inner in sub.node:
                if inner.op_type != "Constant":
                    names.extend(o for o in inner.output if o and o not in outputs)
                if may_hold_graphs(inner):
                    pending.append(inner)
    return names


def _reusable(node: onnx.NodeProto, index: int, step: int, size: int, owner: Mapping[str, Buffer],
              last_use: Mapping[str, int], kept: set[str]) -> Buffer | None:
    """The buffer output ``index`` of ``node`` may share: a view's input, or for an elementwise op any input of
    the same size whose buffer dies at this step (each element is read before it is written)."""
    if index != 0 or not node.input:
        return None
    if node.op_type in ALIAS_OPS:
        source = node.input[0]
        return owner.get(source) if source and source not in kept else None
    if node.op_type not in IN_PLACE_OPS:
        return None
    for source in node.input:
        shared = owner.get(source) if source and source not in kept else None
        if shared is not None and last_use.get(source) == step and shared.size == size and shared.end == step:
            return shared
    return None


def _bytes(shape: list[Any], bits: int, scope: Mapping[str, int]) -> int | None:
    """Bytes of a tensor of ``shape`` (dims bound by ``scope``), None when a dim is unknown or unbound."""
    if not bits:
        return None
    elements = 1
    for dim in shape:
        if dim is None:
            return None
        try:
            elements *= symdim.evaluate(dim, scope)
        except KeyError:
            return None
    return (elements * bits + 7) // 8


def _elements(dims: Any) -> int:
    total = 1
    for d in dims:
        total *= int(d)
    return total


def _aligned(size: int) -> int:
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


#: orders buffers are placed in (the smallest arena wins)
ORDERS: dict[str, Any] = {
    "largest first": lambda b: (-b.size, b.start),
    "longest-lived first": lambda b: (-(b.end - b.start), -b.size),
    "largest area first": lambda b: (-b.size * (b.end - b.start + 1), b.start),
    "earliest first": lambda b: (b.start, -b.size),
}
#: buffers living at least this share of the steps go first (at the bottom) in the "pinned" orders
LONG_LIVED = (0.5, 0.25)
#: the local search over placement orders stops at the lower bound, after MAX_MOVES moves, or when the
#: placements it tried have looked at SEARCH_WORK pairs of buffers live at the same time (a bound for huge
#: graphs that, unlike a clock, gives the same plan on every machine; the moves are seeded)
MAX_MOVES = 3000
SEARCH_WORK = 4_000_000
#: the fixed orders are placed while their work (pairs of buffers live at once looked at, and buffers) stays
#: within this: all of them for a usual model, fewer for a huge one, none where the buffers overlap in too many
#: pairs (a graph where thousands of tensors live at once took minutes), which the allocator places alone
PLACEMENT_WORK = 4_000_000


def _best_placement(buffers: list[Buffer], lower: int) -> tuple[int, str, list[int]]:
    """The smallest arena of: the fixed orders (as many as :data:`PLACEMENT_WORK` allows), then a local search
    over the order (move one buffer earlier, keep the move when the arena is no larger) within
    :data:`MAX_MOVES` and :data:`SEARCH_WORK`, until the lower bound; and an allocator's placement in time order
    (:func:`_place_in_time_order`), the only one where the buffers live at once in too many pairs."""
    allocated = _place_in_time_order(buffers)
    by_allocator = (_arena(buffers, allocated), "in time order, best fit", allocated)
    placements = PLACEMENT_WORK // (2 * _overlapping_pairs(buffers) + len(buffers) + 1)
    if not placements:
        return by_allocator
    greedy = _greedy_placement(buffers, lower, placements)
    return by_allocator if by_allocator[0] < greedy[0] else greedy


def _greedy_placement(buffers: list[Buffer], lower: int, placements: int) -> tuple[int, str, list[int]]:
    """The best of the first ``placements`` fixed orders and fits, improved by the local search."""
    n = len(buffers)
    steps = max((b.end for b in buffers), default=0) + 1
    candidates: list[tuple[str, list[int]]] = []
    for name, key in ORDERS.items():
        ranked = [key(b) for b in buffers]
        candidates.append((name, sorted(range(n), key=ranked.__getitem__)))
    for share in LONG_LIVED:
        def pinned(i: int, share: float = share) -> tuple[int, int, int]:
            b = buffers[i]
            return (0 if (b.end - b.start + 1) >= share * steps else 1, -b.size, b.start)
        candidates.append((f"long-lived ({share:.0%} of steps) pinned, then largest first", sorted(range(n),
                                                                                                  key=pinned)))
    best: tuple[int, str, list[int], list[int], str] | None = None
    overlapping = _overlapping(buffers)
    overlapping_set = [set(found) for found in overlapping]
    for (name, order), fit in itertools.islice(itertools.product(candidates, ("best", "first")), placements):
        offsets = _place_order(buffers, order, fit, overlapping)
        arena = _arena(buffers, offsets)
        if best is None or arena < best[0]:
            best = (arena, f"{name}, {fit} fit", offsets, order, fit)
    assert best is not None
    arena, strategy, offsets, order, fit = best
    rng = random.Random(0)
    work_per_move = sum(len(n) for n in overlapping) + n
    # the moves only reorder buffers that matter (small ones fill the gaps whatever their order)
    large = [k for k in range(n) if buffers[k].size * 64 >= lower] or list(range(n))
    improved = False
    moves = 0
    while arena > lower and n > 1 and moves < MAX_MOVES and (moves + 1) * work_per_move <= SEARCH_WORK:
        moves += 1
        trial = list(order)
        # move a buffer that sits above the lower bound (or one live at the same time) earlier in the order
        above = [k for k in large if offsets[k] + _aligned(buffers[k].size) > lower]
        pick = rng.choice(above) if above and rng.random() < 0.7 else rng.choice(large)
        if rng.random() < 0.5:
            neighbours = [k for k in large if k != pick and k in overlapping_set[pick]]
            pick = rng.choice(neighbours) if neighbours else pick
        i = trial.index(pick)
        if i == 0:
            continue
        j = rng.randrange(0, i)
        trial.insert(j, trial.pop(i))
        trial_offsets = _place_order(buffers, trial, fit, overlapping)
        trial_arena = _arena(buffers, trial_offsets)
        if trial_arena <= arena:
            improved = improved or trial_arena < arena
            order, offsets, arena = trial, trial_offsets, trial_arena
    return arena, strategy + (", then local search" if improved else ""), offsets


def _arena(buffers: list[Buffer], offsets: list[int]) -> int:
    return max((o + _aligned(b.size) for o, b in zip(offsets, buffers, strict=True)), default=0)


def _lower_bound(buffers: list[Buffer], steps: int) -> tuple[int, int]:
    delta = [0] * (steps + 2)
    for b in buffers:
        delta[b.start] += _aligned(b.size)
        delta[b.end + 1] -= _aligned(b.size)
    live = best = 0
    best_step = 0
    for step in range(steps + 1):
        live += delta[step]
        if live > best:
            best, best_step = live, step
    return best, best_step


def _overlapping(buffers: list[Buffer]) -> list[list[int]]:
    """For each buffer, the other buffers live at some same step (a sweep over start steps, not all pairs)."""
    found: list[list[int]] = [[] for _ in buffers]
    by_start = sorted(range(len(buffers)), key=lambda k: buffers[k].start)
    live: list[int] = []
    for i in by_start:
        start = buffers[i].start
        live = [j for j in live if buffers[j].end >= start]
        for j in live:
            found[i].append(j)
            found[j].append(i)
        live.append(i)
    return found


def _overlapping_pairs(buffers: list[Buffer]) -> int:
    """How many pairs of buffers are live at a same step, counted without listing them."""
    ends = sorted(b.end for b in buffers)
    # a buffer overlaps those started before it (in start order) that have not ended before its start
    return sum(i - bisect.bisect_left(ends, start) for i, start in enumerate(sorted(b.start for b in buffers)))


def _place_in_time_order(buffers: list[Buffer]) -> list[int]:
    """Offsets as an allocator running the model would give them: the buffers in the order they are made
    (larger first at a step), each in the smallest free block that holds it, else on top (extending a free
    block there); a buffer's block is freed after its last step and merged with free neighbours. O(n log n)
    whatever the buffers' overlaps (while the free blocks are few, as a run's are)."""
    offsets = [-1] * len(buffers)
    ending: list[tuple[int, int]] = []  # (last step, buffer) of the placed buffers not yet freed
    free = _FreeBlocks()
    for k in sorted(range(len(buffers)), key=lambda k: (buffers[k].start, -buffers[k].size, k)):
        buffer = buffers[k]
        while ending and ending[0][0] < buffer.start:
            _, done = heapq.heappop(ending)
            free.release(offsets[done], _aligned(buffers[done].size))
        offsets[k] = free.take(_aligned(buffer.size))
        heapq.heappush(ending, (buffer.end, k))
    return offsets


class _FreeBlocks:
    """The free blocks of an arena that grows at its top: best fit, freed neighbours merged."""

    def __init__(self) -> None:
        self.top = 0
        self._by_start: dict[int, int] = {}  # start -> size
        self._by_end: dict[int, int] = {}  # end -> start
        self._by_size: list[tuple[int, int]] = []  # (size, start), sorted

    def take(self, size: int) -> int:
        """The offset of a block of ``size`` bytes: the smallest free block that holds it, else the top."""
        i = bisect.bisect_left(self._by_size, (size, -1))
        if i < len(self._by_size):
            block, start = self._by_size[i]
            self._remove(start, block)
            if block > size:
                self._add(start + size, block - size)
            return start
        start = self._by_end.get(self.top, self.top)  # a free block ending at the top grows into the top
        if start != self.top:
            self._remove(start, self.top - start)
        self.top = start + size
        return start

    def release(self, start: int, size: int) -> None:
        before = self._by_end.get(start)
        if before is not None:  # merged with the free block below
            self._remove(before, start - before)
            size, start = size + start - before, before
        after = self._by_start.get(start + size)
        if after is not None:  # and the one above
            self._remove(start + size, after)
            size += after
        self._add(start, size)

    def _add(self, start: int, size: int) -> None:
        self._by_start[start] = size
        self._by_end[start + size] = start
        bisect.insort(self._by_size, (size, start))

    def _remove(self, start: int, size: int) -> None:
        del self._by_start[start]
        del self._by_end[start + size]
        del self._by_size[bisect.bisect_left(self._by_size, (size, start))]


def _place_order(buffers: list[Buffer], order: list[int], fit: str, overlapping: list[list[int]]) -> list[int]:
    """Greedy placement: each buffer (in ``order``) in a free gap among the already placed buffers that
    overlap it in time (``overlapping``, from :func:`_overlapping`): the smallest gap that fits (``best``) or
    the lowest (``first``)."""
    offsets = [-1] * len(buffers)
    ends = [0] * len(buffers)
    for i in order:
        size = _aligned(buffers[i].size)
        busy = sorted((offsets[j], ends[j]) for j in overlapping[i] if offsets[j] >= 0)
        best_offset, best_gap = None, None
        cursor = 0
        for start, end in busy:
            gap = start - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best_offset, best_gap = cursor, gap
                if fit == "first":
                    break
            cursor = max(cursor, end)
        offsets[i] = best_offset if best_offset is not None else cursor
        ends[i] = offsets[i] + size
    return offsets


def check_bindings(shapes: SymbolicShapes, bindings: Mapping[str, int]) -> None:
    missing = sorted(set(shapes.free_symbols()) - set(bindings) - set(shapes.bindings))
    if missing:
        raise UsageError(f"memory planning needs concrete sizes: bind {', '.join(missing)} with --input-shape "
                         f"NAME=SIZE")
