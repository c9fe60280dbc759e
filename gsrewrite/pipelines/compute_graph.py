"""``compute-graph``: the model without the shape-calculation subgraphs exporters emit, and a shape engine.

Every input of a shape-taking operand (Reshape's shape, Expand's, Tile's repeats, Slice's bounds, Range,
ConstantOfShape, Resize's sizes, Pad's pads, Unsqueeze/Squeeze axes, ...) whose value the symbolic inference
knows is replaced by a constant: the value itself when static (all input dims given), or for Reshape the
``0`` (copy this dim) / ``-1`` (the remaining one) form when the dims are symbolic. The ``Shape -> Gather ->
Concat`` chains that fed them are then dead and removed.

The shape engine (JSON) gives, for each tensor whose shape is dynamic, its dims as expressions of the input
dims (``{"symbols": {...}, "tensors": {"x": ["batch", "seq*2", 768]}}``). :func:`compute_graph` checks it
against the shapes onnxruntime produces when it runs the compute graph at up to three input sizes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from gsrewrite.pipelines.shape_check import ShapeCheck, check_shapes
from gsrewrite.shapes import symdim
from gsrewrite.shapes.rules import Info
from gsrewrite.shapes.walk import InputShapes, SymbolicShapes, infer_symbolic, shape_text

log = logging.getLogger(__name__)

#: op -> positions of its inputs that are shape values
SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Range": (0, 1, 2),
    "ConstantOfShape": (0,), "Resize": (3,), "Pad": (1, 3), "Unsqueeze": (1,), "Squeeze": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "TopK": (1,), "Split": (1,), "OneHot": (1,),
}


@dataclass
class ComputeGraph:
    model: onnx.ModelProto
    engine: dict[str, Any]
    replaced: int
    removed_nodes: int
    shape_ops_left: int
    check: ShapeCheck | None

    def to_dict(self) -> dict[str, Any]:
        return {"replaced_shape_operands": self.replaced, "removed_nodes": self.removed_nodes,
                "nodes": len(self.model.graph.node), "shape_ops_left": self.shape_ops_left,
                "dynamic_tensors": len(self.engine["tensors"]),
                "check": None if self.check is None else self.check.to_dict()}


def compute_graph(model: onnx.ModelProto, input_shapes: InputShapes | None = None, *,
                  check: bool = True) -> ComputeGraph:
    shapes = infer_symbolic(model, input_shapes)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    if input_shapes is not None:
        _set_input_dims(graph, shapes)
    replaced = 0
    constants: dict[str, str] = {}
    for node in graph.node:
        positions = SHAPE_OPERANDS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
        for position in positions:
            if position >= len(node.input) or not node.input[position]:
                continue
            name = node.input[position]
            value = _constant_for(node, position, shapes)
            if value is None or _is_initializer(graph, name):
                continue
            key = f"{name}|{value.tobytes().hex()}"
            if key not in constants:
                constants[key] = _unique(graph, f"{name}_const")
                graph.initializer.append(numpy_helper.from_array(value, constants[key]))
            node.input[position] = constants[key]
            replaced += 1
    before = len(graph.node)
    _remove_dead(graph)
    engine = shape_engine(shapes)
    shape_ops = sum(1 for n in graph.node if n.op_type == "Shape")
    verdict = check_shapes(result, shapes) if check else None
    return ComputeGraph(result, engine, replaced, before - len(graph.node), shape_ops, verdict)


def shape_engine(shapes: SymbolicShapes) -> dict[str, Any]:
    dynamic = {name: shape_text(info.shape) for name, info in shapes.tensors.items()
               if info.shape is not None and any(not isinstance(d, int) for d in info.shape)}
    return {"format": "gsrewrite-shape-engine/1",
            "symbols": dict(sorted(shapes.symbols.items())),
            "inputs": {n: shape_text(shapes.shape(n)) for n in shapes.inputs},
            "tensors": dynamic}


def evaluate_engine(engine: dict[str, Any], bindings: dict[str, int]) -> dict[str, list[int] | None]:
    """The concrete shapes the engine gives at ``bindings`` (``None`` for a tensor with an unknown dim)."""
    out: dict[str, list[int] | None] = {}
    for name, dims in engine["tensors"].items():
        if dims is None or "?" in dims:
            out[name] = None
            continue
        out[name] = [d if isinstance(d, int) else symdim.evaluate(symdim.parse(d), bindings) for d in dims]
    return out


def _constant_for(node: onnx.NodeProto, position: int, shapes: SymbolicShapes) -> np.ndarray | None:
    info: Info | None = shapes.tensors.get(node.input[position])
    if info is None or not info.has_value or info.value is None:
        return None
    items = info.value if isinstance(info.value, list) else [info.value]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(info.dtype) if info.dtype else np.dtype(np.int64)
    shape = [d for d in info.shape or () if isinstance(d, int)]
    if all(isinstance(v, int) for v in items) and info.shape is not None and len(shape) == len(info.shape):
        return np.array(items, dtype=dtype).reshape(shape)
    if node.op_type == "Reshape" and position == 1 and isinstance(info.value, list) and \
            not any(a.name == "allowzero" and a.i for a in node.attribute):
        source = shapes.shape(node.input[0])
        encoded: list[int] = []
        for i, d in enumerate(info.value):
            if isinstance(d, int):
                encoded.append(d)
            elif source is not None and i < len(source) and source[i] == d:
                encoded.append(0)
            else:
                encoded.append(-1)
        if encoded.count(-1) <= 1:
            return np.array(encoded, dtype=np.int64)
    return None


def _is_initializer(graph: onnx.GraphProto, name: str) -> bool:
    return any(t.name == name for t in graph.initializer)


def _unique(graph: onnx.GraphProto, base: str) -> str:
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


def _set_input_dims(graph: onnx.GraphProto, shapes: SymbolicShapes) -> None:
    for value_info in graph.input:
        shape = shapes.shape(value_info.name)
        if shape is None or not value_info.type.HasField("tensor_type"):
            continue
        dims = value_info.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        for dim, value in zip(dims, shape, strict=True):
            if isinstance(value, int):
                dim.Clear()
                dim.dim_value = value
            elif value is not None:
                dim.Clear()
                dim.dim_param = str(value)


def _remove_dead(graph: onnx.GraphProto) -> None:
    """Drop nodes (and initializers) no graph output depends on."""
    from gsrewrite.model_io.graph_walk import node_subgraphs

    needed = {o.name for o in graph.output}
    keep: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(n for n in node.input if n)
            for _, sub in node_subgraphs(node):
                for inner in sub.node:
                    needed.update(inner.input)
    keep.reverse()
    del graph.node[:]
    graph.node.extend(keep)
    used = {n for node in keep for n in node.input} | needed
    live = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(live)
