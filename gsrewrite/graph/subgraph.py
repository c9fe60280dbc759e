"""Cutting a self-contained model out of a model: the nodes between given tensors (``gsrewrite extract``).

:func:`cut` keeps the nodes that compute ``outputs`` from ``inputs`` (and from constants), only the initializers
they read, the local functions they call, the original's opsets, IR version and metadata; the new graph
inputs and outputs are typed from shape inference of the whole model. A node inside the cut that reads a graph
input not among ``inputs`` is an error naming it (the cut would not be self-contained), as is a name that no
node or input of the model defines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from gsrewrite.errors import UsageError
from gsrewrite.shapes.inference import infer_shapes


def cut(model: onnx.ModelProto, inputs: Sequence[str], outputs: Sequence[str]) -> onnx.ModelProto:
    """The sub-model computing ``outputs`` from ``inputs`` (see the module docstring)."""
    graph = model.graph
    if not outputs:
        raise UsageError("extract needs at least one output tensor")
    producers = {name: node for node in graph.node for name in node.output if name}
    initializers = {t.name: t for t in graph.initializer}
    known = set(producers) | set(initializers) | {i.name for i in graph.input}
    for name in (*inputs, *outputs):
        if name not in known:
            raise UsageError(f"no tensor named {name!r} in the model")
    nodes = needed_nodes(graph, producers, set(inputs), outputs)
    read = {name for node in nodes for name in (*node.input, *outer_reads(node)) if name}
    missing = sorted(n for n in read - set(inputs) - set(initializers) - set(producers)
                     if n in {i.name for i in graph.input})
    if missing:
        raise UsageError(f"the outputs also depend on graph input(s) {', '.join(map(repr, missing))}: "
                         "add them to --inputs")
    types = _types(model)
    sub = onnx.helper.make_graph(
        nodes, f"{graph.name}_extract",
        [_value_info(name, types) for name in inputs],
        [_value_info(name, types) for name in outputs],
        initializer=[initializers[n] for n in sorted(read & set(initializers) - set(inputs))],
    )
    out = onnx.helper.make_model(sub, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    for field in ("producer_name", "producer_version", "domain", "model_version"):
        setattr(out, field, getattr(model, field))
    used = {(n.domain, n.op_type) for n in nodes}
    out.functions.extend(f for f in model.functions if (f.domain, f.name) in used)
    return out


def needed_nodes(graph: onnx.GraphProto, producers: Mapping[str, onnx.NodeProto], stop: set[str],
                  outputs: Sequence[str]) -> list[onnx.NodeProto]:
    """The nodes ``outputs`` need, walking back from them and stopping at ``stop``; in the graph's order."""
    needed: set[int] = set()
    pending = [name for name in outputs if name not in stop]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen or name in stop:
            continue
        seen.add(name)
        node = producers.get(name)
        if node is None or id(node) in needed:
            continue
        needed.add(id(node))
        pending.extend(n for n in (*node.input, *outer_reads(node)) if n)
    return [node for node in graph.node if id(node) in needed]


def outer_reads(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies) read from the enclosing scope."""
    reads: set[str] = set()
    for attr in node.attribute:
        for body in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            defined = {i.name for i in body.input} | {t.name for t in body.initializer}
            defined |= {o for n in body.node for o in n.output}
            for inner in body.node:
                reads |= {n for n in (*inner.input, *outer_reads(inner)) if n and n not in defined}
    return reads


def _types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    inferred = infer_shapes(model)
    graph = inferred.graph
    found = {vi.name: vi for vi in (*graph.value_info, *graph.input, *graph.output)}
    for tensor in model.graph.initializer:
        found.setdefault(tensor.name, onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                                         list(tensor.dims)))
    return found


def _value_info(name: str, types: Mapping[str, onnx.ValueInfoProto]) -> onnx.ValueInfoProto:
    info = types.get(name)
    if info is None or not info.type.tensor_type.elem_type:
        raise UsageError(f"the type of {name!r} is unknown (shape inference cannot tell): extract a tensor "
                         "whose type is known, or give the model's inputs fixed shapes first")
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(info)
    return copy
