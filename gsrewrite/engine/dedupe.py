"""Nodes a rewrite added that repeat an existing computation are merged into it.

Each match builds its replacement on its own, so four attention blocks that each cast the same
``attention_mask`` to int32 leave four identical ``Cast`` nodes. After the rewrite pass, an added node with
the same op, attributes and inputs as an earlier node (see
:func:`gsrewrite.graph.twins.node_key`) hands its readers to that node and goes; the small
constants replacements bring along (Reshape targets, Slice bounds) count as the same input when their values
are. Only added nodes are ever removed: ``apply`` leaves the rest of the model as it found it.
"""

from __future__ import annotations

from collections.abc import Hashable

import onnx_graphsurgeon as gs

from gsrewrite.graph.core import constant_values
from gsrewrite.graph.twins import merge_twins

#: Constants up to this many bytes are compared by value when merging.
SMALL_CONSTANT = 4096


def merge_added_duplicates(graph: gs.Graph, added: set[int]) -> int:
    """Merge nodes whose ``id`` is in ``added`` into earlier identical nodes; ``graph`` must be sorted.

    Returns the number of nodes removed. Nodes writing a graph output are never removed.
    """
    if not added:
        return 0
    _share_small_constants([n for n in graph.nodes if id(n) in added])
    read_by_added = {id(t) for n in graph.nodes if id(n) in added for t in n.inputs}
    # only a node sharing an input with an added node can be an added node's twin; only added ones go
    return merge_twins(graph, lambda n: id(n) in added or any(id(t) in read_by_added for t in n.inputs),
                       lambda n: id(n) in added)


def _share_small_constants(nodes: list[gs.Node]) -> None:
    """Let ``nodes`` read one constant per small value (so that equal replacements have equal inputs)."""
    seen: dict[Hashable, gs.Constant] = {}
    for node in nodes:
        for i, tensor in enumerate(node.inputs):
            if not isinstance(tensor, gs.Constant):
                continue
            value = constant_values(tensor)
            if value.nbytes > SMALL_CONSTANT:
                continue
            first = seen.setdefault((value.dtype.str, value.shape, value.tobytes()), tensor)
            if first is not tensor:
                node.inputs[i] = first
