"""How large a model becomes once its local functions are expanded, computed without expanding them.

A 2 KB model can call a function that calls another twice, 30 levels deep: 2**30 nodes once expanded. ONNX
shape inference and onnxruntime expand every call (onnx 1.23 and onnxruntime 1.32 both ran for minutes, in
native code no signal stops, on such a file). Whatever expands functions asks :func:`expanded_nodes` first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import onnx

from gsrewrite.model_io.graph_walk import iter_nodes, walk_nodes

#: Most nodes a model may have with its local functions expanded (beyond: not expanded, not run).
MAX_EXPANDED_NODES = 1_000_000


def expanded_nodes(model: onnx.ModelProto, limit: int = MAX_EXPANDED_NODES) -> int | None:
    """Nodes of ``model`` (all graphs) with every local-function call expanded; None when that is over
    ``limit`` or a function calls itself (directly or not)."""
    functions = {(f.domain, f.name): f for f in model.functions}
    sizes: dict[tuple[str, str], int | None] = {}

    def size(key: tuple[str, str], active: frozenset[tuple[str, str]]) -> int | None:
        if key in active:
            return None
        if key not in sizes:
            sizes[key] = _count(walk_nodes(functions[key].node), functions, lambda k: size(k, active | {key}), limit)
        return sizes[key]

    return _count(iter_nodes(model), functions, lambda k: size(k, frozenset()), limit)


def _count(nodes: Iterable[onnx.NodeProto], functions: dict[tuple[str, str], onnx.FunctionProto],
           size: Callable[[tuple[str, str]], int | None], limit: int) -> int | None:
    total = 0
    for node in nodes:
        key = (node.domain, node.op_type)
        count = size(key) if key in functions else 1
        if count is None:
            return None
        total += count
        if total > limit:
            return None
    return total


def expansion_problem(model: onnx.ModelProto) -> str | None:
    """Why ``model`` must not be given to anything that expands its local functions (onnxruntime), or None."""
    if not model.functions or expanded_nodes(model) is not None:
        return None
    return f"its local functions are recursive or expand to more than {MAX_EXPANDED_NODES:,} nodes"
