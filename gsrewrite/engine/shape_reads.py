"""Shape reads of a match's intermediates moved to tensors that survive the replacement.

An intermediate read outside the match only through ``Shape`` does not block a fusion, but the nodes
computing it then stay in the graph (:attr:`Match.kept`) — for an attention block that means computing the
attention twice. Exporters (and simplify's shape folding, which reads a dim from the first tensor known to
have it) often measure such intermediates for dims the match's inputs or outputs have too. Shape inference
names equal dims equally (``batch``, ``unk__3``), so a ``Shape`` reader whose dims all appear, in the same
order, in a match input or output is pointed at that tensor instead, and the intermediate need not be kept.
A reader whose result the match itself reads (T5's zero bias sized by the keys' length) is pointed at a match
input only: read from an output, the replacement would compute its own input (a cycle).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.engine.acyclic import Positions
from gsrewrite.engine.match import Match
from gsrewrite.engine.replace import replacement_inputs
from gsrewrite.graph.core import NameSource

#: ``Shape`` takes ``start``/``end`` attributes from this opset on.
_SHAPE_SLICE_OPSET = 15


def release_shape_reads(match: Match, names: NameSource, positions: Positions | None = None) -> None:
    """Redirect the ``Shape`` readers of ``match.kept`` intermediates where possible; update ``match.kept``.
    ``positions``: the sweep's node numbering (kept up to date here)."""
    if not match.kept:
        return
    positions = positions if positions is not None else Positions(match.graph)
    survivors, inputs = _survivors(match), _survivors(match, outputs=False)
    read = list(replacement_inputs(match).values())
    opset = int(match.graph.opset)
    inside = {id(n) for n in match.nodes.values()}
    still_kept = set()
    for name in match.kept:
        tensor = match.tensors[name]
        readers = [c for c in list(tensor.outputs) if id(c) not in inside]
        for reader in readers:
            # a reader the match's own inputs are computed from reads none of its outputs, nor those inputs
            if positions.path(reader.outputs, read, inside):
                candidates = [t for t in inputs if not positions.path(reader.outputs, [t], inside)]
            else:
                candidates = survivors
            before = len(match.graph.nodes)
            if _redirect(match.graph, reader, tensor, candidates, opset, names):
                positions.rewired(reader, match.graph.nodes[before:])
            else:
                still_kept.add(name)
    match.kept = frozenset(still_kept)


def _survivors(match: Match, outputs: bool = True) -> list[gs.Tensor]:
    """Tensors that exist after the replacement: the match outputs (unless not ``outputs``), then the inputs the
    replacement reads."""
    template = match.variant.template
    written = [match.tensors[match.variant.outputs.get(o, o)] for o in match.replacement.outputs
               if match.variant.outputs.get(o, o) in match.tensors] if outputs else []
    read = set(match.replacement.inputs)
    inputs = [match.tensors[i] for i in template.inputs if i in read and i in match.tensors]
    return [t for t in [*written, *inputs] if isinstance(t, gs.Variable) and t.shape is not None]


def _redirect(graph: gs.Graph, reader: gs.Node, tensor: gs.Tensor, survivors: list[gs.Tensor], opset: int,
              names: NameSource) -> bool:
    """Make one ``Shape`` reader of ``tensor`` compute the same dims from survivors (and constants for static
    dims); False when some dim cannot be found."""
    if reader.op != "Shape" or reader.domain not in (None, "", "ai.onnx") or tensor.shape is None:
        return False
    rank = len(tensor.shape)
    start = _axis(reader.attrs.get("start", 0), rank)
    end = _axis(reader.attrs.get("end", rank), rank)
    dims = list(tensor.shape[start:end])
    parts = _plan(dims, survivors, opset)
    if parts is None:
        return False
    if len(parts) == 1 and not isinstance(parts[0], list) and _readable_whole(parts[0], opset):
        survivor, first, last = parts[0]
        _become_shape(reader, survivor, first, last)
        return True
    base = reader.name or "shape"
    inputs = []
    for part in parts:
        if isinstance(part, list):
            inputs.append(gs.Constant(names(f"{base}/dims"), np.array(part, dtype=np.int64)))
        else:
            inputs.append(_read_run(graph, part, opset, base, names))
    reader.op, reader.attrs = "Concat", {"axis": 0}
    reader.inputs.clear()
    reader.inputs.extend(inputs)
    return True


def _plan(dims: list[object], survivors: list[gs.Tensor], opset: int) -> list | None:
    """Parts computing ``dims``: lists of static sizes, and (survivor, start, end) runs of named dims."""
    if not dims or not all(_known(d) for d in dims) or not any(isinstance(d, str) for d in dims):
        return None
    parts: list = []
    i = 0
    while i < len(dims):
        if isinstance(dims[i], int):
            if parts and isinstance(parts[-1], list):
                parts[-1].append(dims[i])
            else:
                parts.append([dims[i]])
            i += 1
            continue
        run = _longest_run(dims, i, survivors, opset)
        if run is None:
            return None
        parts.append(run)
        i += run[2] - run[1]
    return parts


def _longest_run(dims: list[object], i: int, survivors: list[gs.Tensor],
                 opset: int) -> tuple[gs.Tensor, int, int] | None:
    """The survivor holding the most of ``dims[i:]`` (named from ``dims[i]`` on) contiguously."""
    best: tuple[gs.Tensor, int, int] | None = None
    for survivor in survivors:
        shape = list(survivor.shape)
        for offset, d in enumerate(shape):
            if d != dims[i]:
                continue
            length = 1
            while (i + length < len(dims) and offset + length < len(shape)
                   and shape[offset + length] == dims[i + length]):
                length += 1
            if best is None or length > best[2] - best[1]:
                best = (survivor, offset, offset + length)
    return best


def _readable_whole(run: tuple[gs.Tensor, int, int], opset: int) -> bool:
    """Whether one ``Shape`` node reads the run (the whole shape, or a range from opset 15 on)."""
    survivor, first, last = run
    return opset >= _SHAPE_SLICE_OPSET or (first == 0 and last == len(survivor.shape))


def _read_run(graph: gs.Graph, run: tuple[gs.Tensor, int, int], opset: int, base: str,
              names: NameSource) -> gs.Tensor:
    """A new tensor holding dims ``first:last`` of the survivor: Shape(start, end), or Shape + Slice."""
    survivor, first, last = run
    shape = gs.Variable(names(f"{base}/read"), dtype=np.int64, shape=[len(survivor.shape)])
    node = gs.Node("Shape", names(f"{base}/read"), inputs=[survivor], outputs=[shape])
    graph.nodes.append(node)
    if _readable_whole(run, opset):
        _become_shape(node, survivor, first, last)
        shape.shape = [last - first]
        return shape
    out = gs.Variable(names(f"{base}/dims"), dtype=np.int64, shape=[last - first])
    bounds = [gs.Constant(names(f"{base}/{what}"), np.array([v], dtype=np.int64))
              for what, v in (("start", first), ("end", last), ("axis", 0))]
    graph.nodes.append(gs.Node("Slice", names(f"{base}/slice"), inputs=[shape, *bounds], outputs=[out]))
    return out


def _become_shape(node: gs.Node, survivor: gs.Tensor, first: int, last: int) -> None:
    node.inputs[0] = survivor  # gs keeps the consumer lists in step
    node.attrs.pop("start", None)
    node.attrs.pop("end", None)
    if not (first == 0 and last == len(survivor.shape)):
        node.attrs["start"], node.attrs["end"] = first, last


def _axis(value: object, rank: int) -> int:
    axis = int(value)  # type: ignore[call-overload]
    axis = axis + rank if axis < 0 else axis
    return max(0, min(axis, rank))


def _known(dim: object) -> bool:
    """A dim that identifies its value: a static size or a name given by shape inference."""
    return (isinstance(dim, int) and dim >= 0) or (isinstance(dim, str) and bool(dim))
