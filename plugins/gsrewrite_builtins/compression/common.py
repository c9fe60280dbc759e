"""What the built-in strategies share: the result they return and small graph lookups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from gsrewrite.plugin_api import tensor_values


@dataclass
class Compressed:
    """A strategy's result: the model, lines for the report, and the nodes it changed (for bisection)."""

    model: onnx.ModelProto
    notes: list[str] = field(default_factory=list)
    quantized_nodes: list[str] = field(default_factory=list)


def without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without its main graph's initializers (a strategy adds those it keeps and those it
    makes: a weight it quantizes is never copied)."""
    from gsrewrite.plugin_api import copy_fields

    light = onnx.ModelProto()
    copy_fields(light, model, skip=("graph",))
    copy_fields(light.graph, model.graph, skip=("initializer",))
    return light


def keep_used_initializers(result: onnx.ModelProto, source: onnx.ModelProto) -> None:
    """Append to ``result`` the main-graph initializers of ``source`` that ``result``'s nodes (any graph) or outputs
    still read (a weight kept as it is: a reference stays a reference)."""
    used = set(consumers(result.graph))
    have = {t.name for t in result.graph.initializer}
    result.graph.initializer.extend(t for t in source.graph.initializer if t.name in used and t.name not in have)


def placed(graph: onnx.GraphProto, tensors: Any) -> tuple[onnx.TensorProto, ...]:
    """``graph``'s initializers named as ``tensors`` (which a strategy copied into it): a cache that refers to
    those holds no second copy of the quantized weights (a protobuf sub-message keeps its model alive; the model
    is the strategy's result, which nobody edits)."""
    by_name = {t.name: t for t in graph.initializer}
    return tuple(by_name.get(t.name, t) for t in tensors)


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
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)
    bad = {name for name, tensor in initializer_map(model.graph).items()
           if tensor.data_type in floats and not _finite(tensor)}
    return {node.name: next(i for i in node.input if i in bad) for node in model.graph.node
            if node.name and bad.intersection(node.input)}


def _finite(tensor: onnx.TensorProto) -> bool:
    values = tensor_values(tensor)
    rows = values.reshape(-1)
    step = 1 << 22  # a few MB at a time: no weight-sized boolean array
    return all(np.isfinite(rows[i:i + step]).all() for i in range(0, rows.size, step))


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


def node_names(model: onnx.ModelProto) -> list[str]:
    """Each main-graph node's name, an unnamed node's ``OpType_index`` (made unique): onnxruntime's quantizers and
    float16 converter exclude nodes by name, so a node without one could not be left out. The names depend only
    on the model: every run names alike."""
    if all(node.name for node in model.graph.node):
        return [node.name for node in model.graph.node]
    taken = _taken(model.graph)
    names = []
    for index, node in enumerate(model.graph.node):
        name = node.name
        if not name:
            name = _unique(f"{node.op_type}_{index}", taken)
            taken.add(name)
        names.append(name)
    return names


def named_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself when every main-graph node has a name, else a copy whose nodes are named by
    :func:`node_names`."""
    if all(node.name for node in model.graph.node):
        return model
    names = node_names(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node, name in zip(copy.graph.node, names, strict=True):
        node.name = name
    return copy
