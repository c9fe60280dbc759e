"""Nodes a rewrite added that repeat an existing computation are merged into it.

Each match builds its replacement on its own, so four attention blocks that each cast the same
``attention_mask`` to int32 leave four identical ``Cast`` nodes. After the rewrite pass, an added node with
the same op, attributes and inputs as an earlier node (see
:func:`gsrewrite.simplifier.passes.cse.node_key`) hands its readers to that node and goes; the small
constants replacements bring along (Reshape targets, Slice bounds) count as the same input when their values
are. Only added nodes are ever removed: ``apply`` leaves the rest of the model as it found it.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import onnx_graphsurgeon as gs

#: Constants up to this many bytes are compared by value when merging.
SMALL_CONSTANT = 4096


def merge_added_duplicates(graph: gs.Graph, added: set[int]) -> int:
    """Merge nodes whose ``id`` is in ``added`` into earlier identical nodes; ``graph`` must be sorted.

    Returns the number of nodes removed. Nodes writing a graph output are never removed.
    """
    from gsrewrite.simplifier.passes.cse import node_key
    from gsrewrite.simplifier.rewiring import disconnect, drop_disconnected, replace_uses

    if not added:
        return 0
    _share_small_constants([n for n in graph.nodes if id(n) in added])
    read_by_added = {id(t) for n in graph.nodes if id(n) in added for t in n.inputs}
    outputs = {id(t) for t in graph.outputs}
    seen: dict[Hashable, gs.Node] = {}
    count = 0
    for node in graph.nodes:
        if id(node) not in added and not any(id(t) in read_by_added for t in node.inputs):
            continue  # shares no input with an added node: cannot be one's twin
        key = node_key(node)
        if key is None:
            continue
        first = seen.setdefault(key, node)
        if first is node or id(node) not in added or any(id(t) in outputs for t in node.outputs):
            continue
        for mine, theirs in zip(list(node.outputs), first.outputs, strict=True):
            replace_uses(mine, theirs)
        disconnect(node)
        count += 1
    if count:
        drop_disconnected(graph)
    return count


def _share_small_constants(nodes: list[gs.Node]) -> None:
    """Let ``nodes`` read one constant per small value (so that equal replacements have equal inputs)."""
    seen: dict[Hashable, gs.Constant] = {}
    for node in nodes:
        for i, tensor in enumerate(node.inputs):
            if not isinstance(tensor, gs.Constant):
                continue
            value = np.asarray(tensor.values)
            if value.nbytes > SMALL_CONSTANT:
                continue
            first = seen.setdefault((value.dtype.str, value.shape, value.tobytes()), tensor)
            if first is not tensor:
                node.inputs[i] = first
