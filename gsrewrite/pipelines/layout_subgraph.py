"""The part of a decoder computed from the token layout alone (the ids' and the cache's shapes, the mask, the
positions), cut out as a model of its own and run in onnxruntime: what the constant rotary tables
(:mod:`gsrewrite.pipelines.rotary_tables`) and the ``unpadded`` contract's proof
(:mod:`gsrewrite.pipelines.unpadded`) evaluate; and :func:`prune`, which removes what such a rewrite leaves unread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import onnx
from onnx import helper

from gsrewrite.graph.subgraph import needed_nodes, outer_reads
from gsrewrite.model_io.tensors import declared_nbytes, is_external


def layout_model(model: onnx.ModelProto, outputs: list[str], fed: Iterable[str], what: str, largest: int
                 ) -> onnx.ModelProto | str:
    """The nodes ``outputs`` are computed by, as a model of their own whose inputs are graph inputs among ``fed``;
    or why not (``what`` names the outputs in the reason): control flow, a constant larger than ``largest`` bytes
    or stored outside the file (a weight), an input not in ``fed``."""
    graph = model.graph
    fed = set(fed)
    producers = {out: node for node in graph.node for out in node.output if out}
    initializers = {t.name: t for t in graph.initializer}
    inputs = {value.name: value for value in graph.input}
    nodes = needed_nodes(graph, producers, set(), outputs)
    flow = next((node for node in nodes if node.op_type in ("Loop", "If", "Scan")), None)
    if flow is not None:
        return f"{what} is computed in a {flow.op_type}"
    read = {name for node in nodes for name in node.input if name} | set(outputs)
    made = {out for node in nodes for out in node.output}
    for name in sorted(read - made):
        tensor = initializers.get(name)
        if tensor is not None:
            if is_external(tensor) or declared_nbytes(tensor) > largest:
                return f"{what} reads the weight {name!r}"
        elif name not in inputs:
            return f"{name!r} has no producer"
        elif name not in fed:
            return f"{what} reads the input {name!r}"
    sub = helper.make_graph(nodes, "layout", [inputs[n] for n in sorted(read & set(inputs) - set(initializers))],
                            [onnx.ValueInfoProto(name=name) for name in dict.fromkeys(outputs)],
                            [initializers[n] for n in sorted(read & set(initializers))])
    return helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def layout_session(sub: onnx.ModelProto) -> Any:
    """An onnxruntime session of ``sub`` on one CPU thread, quiet."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(sub.SerializeToString(), options, providers=["CPUExecutionProvider"])


def prune(graph: onnx.GraphProto) -> int:
    """Remove the nodes nothing reads (no graph output, no node that stays) and the initializers only they read;
    the number of nodes removed."""
    needed = {value.name for value in graph.output}
    keep: list[onnx.NodeProto] = []
    dropped_reads: set[str] = set()
    for node in reversed(graph.node):
        if any(out in needed for out in node.output if out) or _has_subgraph(node):
            keep.append(node)
            needed.update(name for name in node.input if name)
            needed.update(outer_reads(node))
        else:
            dropped_reads.update(node.input)
    removed = len(graph.node) - len(keep)
    if removed:
        keep.reverse()
        del graph.node[:]
        graph.node.extend(keep)
        inputs = {value.name for value in graph.input}
        kept = [t for t in graph.initializer if t.name in needed or t.name in inputs or t.name not in dropped_reads]
        if len(kept) != len(graph.initializer):
            del graph.initializer[:]
            graph.initializer.extend(kept)
    return removed


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
