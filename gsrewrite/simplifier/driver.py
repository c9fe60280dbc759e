"""The fixed-point driver: run the selected passes over the graph and its subgraphs until nothing changes.

One *round* runs every pass, in pipeline order, on the main graph and then on every If/Loop/Scan body
(nested ones included). Rounds repeat until a whole round changes nothing, at most ``max_rounds`` times.
Before the first round ``Constant`` nodes become constants (the form every pass expects; counted as
``constant-nodes``). A pass that changed nothing is skipped until another pass changes the graph, so the
last round (the one that proves the fixed point) costs little.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.errors import GsrewriteError, PluginError
from gsrewrite.graph.constant_nodes import constants_from_nodes
from gsrewrite.graph.core import is_sorted, toposort
from gsrewrite.protocols import GraphPass

log = logging.getLogger(__name__)

MAX_ROUNDS = 8
#: The key under which the counts report ``Constant`` nodes turned into constants before the passes run.
CONSTANT_NODES = "constant-nodes"


def run_to_fixed_point(graph: gs.Graph, passes: Sequence[GraphPass], max_rounds: int = MAX_ROUNDS,
                       on_change: Callable[[], None] | None = None,
                       records: list[Any] | None = None) -> tuple[gs.Graph, Counter, int]:
    """Run ``passes`` until a round changes nothing; returns the graph, changes per pass, and rounds run.

    A pass that found nothing to do is not run again until another pass has changed the graph.
    ``on_change`` is called after every pass that changed something. ``records`` receives the rewrites the passes
    list (the pattern passes' match records, for the report).
    """
    nested = any(True for _ in _subgraphs(graph))  # passes never create subgraphs: look once
    counts: Counter = Counter()
    for g in _graphs(graph):
        counts[CONSTANT_NODES] += _constants_from_nodes(g)
    if not is_sorted(graph):
        toposort(graph)
    counts = +counts
    if counts and on_change is not None:
        on_change()
    version, clean = 0, dict[int, int]()  # clean: pass -> the graph version it last ran on without changing anything
    for round_ in range(1, max_rounds + 1):
        changed = False
        for pass_ in passes:
            if clean.get(id(pass_)) == version:
                continue
            graph, changes = _run_everywhere(graph, pass_, records) if nested else _run_once(graph, pass_, records)
            if changes:
                counts[pass_.name] += changes
                version, changed = version + 1, True
                if on_change is not None:
                    on_change()
            else:
                clean[id(pass_)] = version
        if not changed:
            return graph, counts, round_
    log.warning("simplify did not reach a fixed point in %d rounds", max_rounds)
    return graph, counts, max_rounds


def _constants_from_nodes(graph: gs.Graph) -> int:
    constants_from_nodes(graph)
    before = len(graph.nodes)
    graph.nodes = [n for n in graph.nodes if n.outputs]
    return before - len(graph.nodes)


def _run_everywhere(graph: gs.Graph, pass_: GraphPass, records: list[Any] | None) -> tuple[gs.Graph, int]:
    total = 0
    graph, total = _run_once(graph, pass_, records)
    for owner, attr, index, sub in _subgraphs(graph):
        new, changes = _run_once(sub, pass_, records)
        total += changes
        if new is not sub:
            _put_back(owner, attr, index, new)
    return graph, total


def _run_once(graph: gs.Graph, pass_: GraphPass, records: list[Any] | None = None) -> tuple[gs.Graph, int]:
    try:
        outcome = pass_.run(graph)
    except Exception as exc:
        if isinstance(exc, GsrewriteError) or type(pass_).__module__.startswith("gsrewrite."):
            raise  # a user error, or a bug in gsrewrite itself
        raise PluginError(f"pass {pass_.name!r} failed on graph {graph.name!r}: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    if not outcome.modified:
        return outcome.graph, 0
    if records is not None:
        records.extend(getattr(outcome, "records", None) or ())
    return outcome.graph, max(int(getattr(outcome, "changes", 1) or 1), 1)


def _graphs(graph: gs.Graph) -> Iterator[gs.Graph]:
    yield graph
    for _owner, _attr, _index, sub in _subgraphs(graph):
        yield sub


def _subgraphs(graph: gs.Graph) -> Iterator[tuple[gs.Node, str, int | None, gs.Graph]]:
    """Every subgraph below ``graph`` (depth first) with the node attribute that holds it."""
    for node in list(graph.nodes):
        for attr, value in list(node.attrs.items()):
            held = [(None, value)] if isinstance(value, gs.Graph) else (
                list(enumerate(value)) if isinstance(value, list) and value and isinstance(value[0], gs.Graph)
                else [])
            for index, sub in held:
                yield node, attr, index, sub
                yield from _subgraphs(sub)


def _put_back(owner: gs.Node, attr: str, index: int | None, new: gs.Graph) -> None:
    if index is None:
        owner.attrs[attr] = new
    else:
        owner.attrs[attr][index] = new
