"""Which graph inputs decide control flow: their values reach an If's condition or a Loop's trip count or
condition. Random values for them take branches real data never takes (a sample-rate input), so a failure on
generated inputs names them."""

from __future__ import annotations

from collections import defaultdict, deque

import onnx

#: op -> positions of the inputs that decide which computation runs
_DECIDING = {"If": (0,), "Loop": (0, 1)}


def control_inputs(model: onnx.ModelProto) -> list[str]:
    """Graph inputs (main graph, in order) from which a value flows into a control-flow decision."""
    graph = model.graph
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    return [i.name for i in graph.input if _reaches_decision(i.name, readers)]


def _reaches_decision(start: str, readers: dict[str, list[onnx.NodeProto]]) -> bool:
    seen, queue = {start}, deque([start])
    while queue:
        name = queue.popleft()
        for node in readers.get(name, ()):
            positions = _DECIDING.get(node.op_type)
            if positions is not None and any(i < len(node.input) and node.input[i] == name for i in positions):
                return True
            for out in node.output:
                if out and out not in seen:
                    seen.add(out)
                    queue.append(out)
    return False
