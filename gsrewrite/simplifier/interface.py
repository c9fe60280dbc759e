"""The model's interface across simplification: fixed input shapes in, original names and dims out.

``--input-shape`` fixes dims before simplifying (``input_ids:1x128`` fixes a whole input and binds its
symbolic dims everywhere; ``batch=1`` binds one dim name, and the dims declared as expressions of bound names:
``past + seq``), so more of the graph folds. Without it the
simplified model keeps exactly the original's graph inputs and outputs, symbolic dim names included, and
only the ``value_info`` entries the original had (the result is never padded with inferred shapes).

Exporters annotate nodes, the graph and its inputs/outputs with debug ``metadata_props`` (the dynamo
exporter's stack traces and FX node names: often more bytes than the graph itself). Like every peer tool,
simplify leaves them out unless ``keep_metadata`` (``--keep-metadata``); model-level metadata, producer,
IR version, opsets and functions are always kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from gsrewrite.errors import UsageError
from gsrewrite.model_io.graph_walk import iter_graphs
from gsrewrite.shapes import symdim
from gsrewrite.shapes.input_shapes import InputShapes, ShapeSpec, as_input_shapes, check_names


def with_input_shapes(model: onnx.ModelProto, input_shapes: ShapeSpec | None) -> onnx.ModelProto:
    """A copy of ``model`` whose inputs have the given shapes/dim sizes (``model`` itself when none)."""
    if not input_shapes:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inputs = _feedable_inputs(out)
    bound = _bind(inputs, as_input_shapes(input_shapes))
    for value_info in inputs.values():
        for dim in value_info.type.tensor_type.shape.dim:
            size = _bound_size(dim, bound) if dim.HasField("dim_param") else None
            if size is not None:
                dim.dim_value = size
    del out.graph.value_info[:]  # inferred again from the fixed shapes
    return out


def _feedable_inputs(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    initializers = {t.name for t in model.graph.initializer}
    return {vi.name: vi for vi in model.graph.input if vi.name not in initializers}


def _bind(inputs: dict[str, onnx.ValueInfoProto], given: InputShapes) -> dict[str, int]:
    """Dim name -> size; whole-input shapes are written into the inputs directly."""
    dim_names = {d.dim_param for vi in inputs.values() for d in vi.type.tensor_type.shape.dim if d.dim_param}
    symbols = dim_names | {name for d in dim_names for name in symdim.symbols(symdim.from_dim_param(d))}
    check_names(given, list(inputs), symbols)
    bound = dict(given.bindings)
    for name in given.shapes:
        bound.update(_set_shape(inputs[name], list(given.sizes(name))))
    return bound


def _bound_size(dim: onnx.TensorShapeProto.Dimension, bound: Mapping[str, int]) -> int | None:
    """The size of a ``dim_param`` the bindings give: by name, or an expression whose symbols are all bound
    (``past + seq`` with ``past`` and ``seq`` given)."""
    if dim.dim_param in bound:
        return bound[dim.dim_param]
    value = symdim.from_dim_param(dim.dim_param)
    if isinstance(value, int) or not value.symbols() <= bound.keys():
        return None
    size = symdim.evaluate(value, bound)
    return size if size >= 0 else None


def _set_shape(value_info: onnx.ValueInfoProto, shape: list[int]) -> dict[str, int]:
    tensor_type = value_info.type.tensor_type
    dims = tensor_type.shape.dim
    if tensor_type.HasField("shape") and len(dims) != len(shape):
        raise UsageError(f"input {value_info.name!r} has rank {len(dims)}; the shape given has {len(shape)} dims")
    bound: dict[str, int] = {}
    if not tensor_type.HasField("shape"):
        for size in shape:
            tensor_type.shape.dim.add().dim_value = size
        return bound
    for dim, size in zip(dims, shape, strict=True):
        if dim.HasField("dim_value") and dim.dim_value != size:
            raise UsageError(f"input {value_info.name!r} has a fixed dim {dim.dim_value}, not {size}")
        if dim.dim_param:
            bound[dim.dim_param] = size
        dim.dim_value = size
    return bound


def restore_interface(model: onnx.ModelProto, original: onnx.ModelProto, *, keep_io: bool,
                      keep_metadata: bool = False) -> None:
    """Put the original's input/output declarations back (when ``keep_io``), drop value_info entries the
    original did not have, and carry the exporter's debug metadata over only when ``keep_metadata``."""
    if keep_io:
        _copy_by_name(model.graph.input, original.graph.input)
        _copy_by_name(model.graph.output, original.graph.output)
    known = {vi.name for graph, _ in iter_graphs(original) for vi in graph.value_info}
    for graph, _ in iter_graphs(model):
        kept = [vi for vi in graph.value_info if vi.name in known]
        if len(kept) != len(graph.value_info):
            del graph.value_info[:]
            graph.value_info.extend(kept)
    if keep_metadata:
        _copy_metadata(model, original)
    else:
        for value_info in [*model.graph.input, *model.graph.output]:
            del value_info.metadata_props[:]


def _copy_by_name(target: Sequence[onnx.ValueInfoProto], source: Sequence[onnx.ValueInfoProto]) -> None:
    by_name = {vi.name: vi for vi in source}
    for value_info in target:
        if value_info.name in by_name:
            value_info.CopyFrom(by_name[value_info.name])


def _copy_metadata(model: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """Node metadata (by node name, for the nodes that survive) and graph metadata, all graphs."""
    nodes = {n.name: n for graph, _ in iter_graphs(original) for n in graph.node if n.name and n.metadata_props}
    graphs = {g.name: g for g, _ in iter_graphs(original) if g.metadata_props}
    for graph, _ in iter_graphs(model):
        if graph.name in graphs and not graph.metadata_props:
            graph.metadata_props.extend(graphs[graph.name].metadata_props)
        for node in graph.node:
            source = nodes.get(node.name)
            if source is not None and not node.metadata_props:
                node.metadata_props.extend(source.metadata_props)
