"""What the built-in strategies share: the result they return and small graph lookups."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx


@dataclass
class Compressed:
    """A strategy's result: the model, lines for the report, and the nodes it changed (for bisection)."""

    model: onnx.ModelProto
    notes: list[str] = field(default_factory=list)
    quantized_nodes: list[str] = field(default_factory=list)


def initializer_map(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    inputs = {i.name for i in graph.input}
    return {t.name: t for t in graph.initializer if t.name not in inputs}


def consumers(graph: onnx.GraphProto) -> dict[str, int]:
    """How many node inputs (main graph and subgraphs) read each name."""
    counts: dict[str, int] = {}

    def walk(g: onnx.GraphProto) -> None:
        for node in g.node:
            for name in node.input:
                counts[name] = counts.get(name, 0) + 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for sub in attr.graphs:
                        walk(sub)
    walk(graph)
    for output in graph.output:
        counts[output.name] = counts.get(output.name, 0) + 1
    return counts


def non_finite_weights(model: onnx.ModelProto) -> dict[str, str]:
    """Node name -> the float weight holding NaN or infinity it reads (main graph): quantizing such a weight gives
    an infinite scale (onnxruntime's quantizers fail, "scale issue"), so those nodes stay float."""
    from onnx import numpy_helper

    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)
    bad = {name for name, tensor in initializer_map(model.graph).items()
           if tensor.data_type in floats and not np.isfinite(numpy_helper.to_array(tensor)).all()}
    return {node.name: next(i for i in node.input if i in bad) for node in model.graph.node
            if node.name and bad.intersection(node.input)}


def unique_name(model: onnx.ModelProto, base: str) -> str:
    return _unique(base, _taken(model.graph))


def _taken(graph: onnx.GraphProto) -> set[str]:
    return {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output} | \
        {n.name for n in graph.node} | {i.name for i in graph.input}


def _unique(base: str, taken: set[str]) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-/" else "_" for c in base)
    name, i = cleaned, 0
    while name in taken:
        i += 1
        name = f"{cleaned}_{i}"
    return name


def named_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself when every main-graph node has a name, else a copy whose unnamed nodes are named
    ``OpType_index`` (made unique): onnxruntime's quantizers and float16 converter exclude nodes by name, so a
    node without one could not be left out. The names depend only on the model: every run names alike."""
    if all(node.name for node in model.graph.node):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    taken = _taken(copy.graph)
    for index, node in enumerate(copy.graph.node):
        if not node.name:
            node.name = _unique(f"{node.op_type}_{index}", taken)
            taken.add(node.name)
    return copy
