"""Loops that cannot end within the run time limit, found from the graph before onnxruntime runs anything.

A ``Loop`` whose trip count is a constant and whose condition cannot stop it earlier (no condition, or a constant
true that the body passes on unchanged) runs exactly that many iterations; without a trip count it never ends.
Each iteration runs the body's nodes, and onnxruntime takes over a microsecond per node there (2.7 us for a
two-node body, onnxruntime 1.32 on the dev machine), so counting :data:`NODE_RUNS_PER_SECOND` (ten times faster
than that) gives a time the run certainly takes: past the run limit (``GSREWRITE_RUN_TIMEOUT``, 600 s), the run is
refused at once instead of being stopped after 600 s. Nested loops multiply; a loop that may end earlier, and
whatever runs only inside an If branch, are not counted.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

#: node executions a second no onnxruntime run exceeds inside a Loop (a lower bound of the time an iteration takes)
NODE_RUNS_PER_SECOND = 10_000_000


def endless_loop(model: onnx.ModelProto, limit_s: float) -> str | None:
    """Why ``model`` cannot finish a run within ``limit_s`` seconds (a Loop's certain iterations), else None."""
    return _walk(model.graph, 1, {}, limit_s * NODE_RUNS_PER_SECOND)


def _walk(graph: onnx.GraphProto, times: int, outer: dict[str, onnx.TensorProto], node_runs: float) -> str | None:
    """The first Loop of ``graph`` (run ``times`` times) past ``node_runs`` node executions, through the bodies
    of the loops that certainly run."""
    constants = {**outer, **_constants(graph)}
    for index, node in enumerate(graph.node):
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
            continue
        body = next((a.g for a in node.attribute if a.name == "body" and a.type == onnx.AttributeProto.GRAPH), None)
        if body is None or not _never_ends_early(node, body, constants):
            continue
        where = f"Loop '{node.name}'" if node.name else f"Loop #{index}"
        trips = _scalar(constants.get(node.input[0])) if node.input and node.input[0] else math.inf
        if trips is None:
            continue
        runs = times * trips * max(len(body.node), 1)
        if runs > node_runs:
            count = "forever (no trip count, a condition that stays true)" if trips == math.inf \
                else f"{int(trips):,} iterations" + (f" (in {times:,} of an enclosing loop's)" if times > 1 else "")
            return (f"{where} runs {count} of {len(body.node)} node(s), longer than the run limit of "
                    f"{node_runs / NODE_RUNS_PER_SECOND:g} s")
        if trips >= 1:
            found = _walk(body, int(times * trips), constants, node_runs)
            if found is not None:
                return found
    return None


def _never_ends_early(node: onnx.NodeProto, body: onnx.GraphProto, constants: dict[str, onnx.TensorProto]) -> bool:
    """The loop's condition is absent or a constant true, and the body hands it on unchanged (or a constant true)."""
    condition = node.input[1] if len(node.input) > 1 else ""
    if condition and _scalar(constants.get(condition)) != 1:
        return False
    if len(body.input) < 2 or not body.output:
        return False
    carried, out = body.input[1].name, body.output[0].name
    producers = {o: n for n in body.node for o in n.output}
    while out in producers and producers[out].op_type == "Identity" and producers[out].input:
        out = producers[out].input[0]
    return out == carried or _scalar(_constants(body).get(out)) == 1


def _constants(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """The one-element constants of ``graph``: initializers and Constant nodes' tensors."""
    found = {t.name: t for t in graph.initializer if math.prod(t.dims) == 1}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attribute in node.attribute:
                if attribute.name == "value" and math.prod(attribute.t.dims) == 1:
                    found[node.output[0]] = attribute.t
    return found


def _scalar(tensor: onnx.TensorProto | None) -> int | None:
    """The integer value of a one-element constant (a bool as 0/1), else None."""
    if tensor is None or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        value = np.asarray(numpy_helper.to_array(tensor)).reshape(-1)
    except Exception:  # a malformed constant tells nothing
        return None
    return int(value[0]) if value.size == 1 and value.dtype.kind in "biu" else None
