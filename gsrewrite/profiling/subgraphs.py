"""What profiling needs to see inside a node's subgraphs and a model's local functions.

* :func:`subgraph_model`: an ``If`` branch, a ``Loop`` or ``Scan`` body as a model of its own, profiled like any
  model: its formal inputs typed from the node's inputs when the body does not say (loop-carried values,
  scan slices), the outer-scope values it reads as graph inputs typed from the outer graph's symbolic shapes
  (expressions travel as ``dim_param``), the outer constants it reads as its initializers.
* :func:`inline_functions`: the model with its local-function calls expanded (onnx's inliner), so that the
  nodes inside a function are profiled; not when the expansion would be recursive or larger than
  :data:`MAX_INLINED_NODES` nodes (:mod:`gsrewrite.model_io.functions` counts it without expanding): those
  calls stay, unprofiled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import onnx

from gsrewrite.model_io.functions import expanded_nodes
from gsrewrite.model_io.graph_walk import iter_nodes, node_subgraphs
from gsrewrite.shapes.walk import SymbolicShapes, value_info

log = logging.getLogger(__name__)

#: Nesting depth of subgraphs profiled (deeper ones are unknown).
MAX_DEPTH = 8
#: Largest main graph an inlining may produce.
MAX_INLINED_NODES = 200_000


def outer_names(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (and the graphs nested in it) read without defining them, in first-use order."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {s.values.name for s in graph.sparse_initializer}
    seen: dict[str, None] = {}
    for node in graph.node:
        reads = list(node.input)
        for _, body in node_subgraphs(node):
            reads += outer_names(body)
        for name in reads:
            if name and name not in defined:
                seen.setdefault(name, None)
        defined.update(o for o in node.output if o)
    return list(seen)


def subgraph_model(graph: onnx.GraphProto, outer: onnx.ModelProto, shapes: SymbolicShapes,
                   constants: Mapping[str, onnx.TensorProto],
                   formal: Iterable[onnx.ValueInfoProto | None] = ()) -> onnx.ModelProto:
    """``graph`` as a standalone model (see the module docstring); ``formal``: a typed stand-in for each formal
    input the body declares without a type (None to keep the body's)."""
    sub = onnx.GraphProto(name=graph.name or "subgraph")
    sub.node.extend(graph.node)
    sub.initializer.extend(graph.initializer)
    sub.sparse_initializer.extend(graph.sparse_initializer)
    sub.output.extend(graph.output)
    sub.value_info.extend(graph.value_info)
    stand_ins = list(formal)
    for index, declared in enumerate(graph.input):
        stand_in = stand_ins[index] if index < len(stand_ins) else None
        if stand_in is not None and not _typed(declared):
            typed = onnx.ValueInfoProto()
            typed.CopyFrom(stand_in)
            typed.name = declared.name
            sub.input.append(typed)
        else:
            sub.input.append(declared)
    for name in outer_names(graph):
        if name in constants:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(constants[name])
            tensor.name = name
            sub.initializer.append(tensor)
            continue
        info = value_info(shapes, name)
        sub.input.append(info if info is not None else onnx.helper.make_value_info(name, onnx.TypeProto()))
    model = onnx.ModelProto(ir_version=outer.ir_version, graph=sub)
    model.opset_import.extend(outer.opset_import)
    model.functions.extend(outer.functions)
    return model


def _typed(info: onnx.ValueInfoProto) -> bool:
    kind = info.type.WhichOneof("value")
    return kind is not None and (kind != "tensor_type" or info.type.tensor_type.HasField("shape"))


def inline_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its local-function calls expanded, or ``model`` itself when it calls none, or when the
    expansion is recursive or too large (see the module docstring)."""
    functions = {(f.domain, f.name): f for f in model.functions}
    if not functions or not any((n.domain, n.op_type) in functions for n in iter_nodes(model)):
        return model
    if expanded_nodes(model, MAX_INLINED_NODES) is None:
        log.info("the local functions are recursive or expand past %d nodes: their calls stay unprofiled",
                 MAX_INLINED_NODES)
        return model
    from onnx import inliner

    try:
        return inliner.inline_local_functions(model, False)
    except Exception as exc:  # onnx's inliner on a model it cannot expand: the calls stay unprofiled
        log.info("local functions not inlined: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return model
