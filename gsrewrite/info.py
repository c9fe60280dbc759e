"""A summary of an ONNX model: producer, versions, inputs/outputs, operators, parameters.

:func:`model_info` backs ``gsrewrite info``. Given a path it loads the model without its weights (large inline
ones stay in the file, external data is validated but not read), so it is cheap even for multi-gigabyte models.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from onnx import AttributeProto, ModelProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto

from gsrewrite.model_io.graph_walk import iter_graphs, iter_nodes, tensor_protos
from gsrewrite.model_io.tensors import declared_nbytes, dtype_name, element_count, is_external
from gsrewrite.model_io.weightless import load_weightless

_DEFAULT_DOMAINS = ("", "ai.onnx")
#: Constant-node attributes holding numbers: attribute -> (AttributeProto field, bytes per value).
_CONSTANT_NUMBERS = {
    "value_float": ("f", 4),
    "value_floats": ("floats", 4),
    "value_int": ("i", 8),
    "value_ints": ("ints", 8),
}


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: its name, element type and shape (ints, symbolic names, or None)."""

    name: str
    dtype: str
    shape: list[int | str | None] | None


@dataclass(frozen=True)
class ModelInfo:
    """The summary printed by ``gsrewrite info``; :meth:`to_dict` gives its JSON form."""

    producer_name: str
    producer_version: str
    ir_version: int
    opset_imports: dict[str, int]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    node_count: int
    node_count_total: int
    op_histogram: dict[str, int]
    parameter_count: int
    parameter_bytes: int
    external_data_bytes: int
    external_data_files: list[str]
    functions: list[str]
    metadata: dict[str, str] = field(default_factory=dict)
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (lists, dicts, strings and numbers)."""
        return dataclasses.asdict(self)


def model_info(model_or_path: ModelProto | str | os.PathLike[str], path: str | None = None) -> ModelInfo:
    """Summarize a model given as a ModelProto or as a path (loaded and checked without its weights:
    :func:`gsrewrite.model_io.weightless.load_weightless`). ``path``: the file a ModelProto was loaded from that
    way (its weights left in the file are not external data)."""
    if isinstance(model_or_path, ModelProto):
        model = model_or_path
    else:
        path = os.fspath(model_or_path)
        model = load_weightless(path)
    count, nbytes = _parameters(model)
    external_bytes, external_files = _external_data(model, os.path.basename(path) if path else None)
    histogram = op_histogram(model)
    return ModelInfo(
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        ir_version=model.ir_version,
        opset_imports={(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        inputs=_specs(model.graph.input, {t.name for t in model.graph.initializer}),
        outputs=_specs(model.graph.output, set()),
        node_count=len(model.graph.node),
        node_count_total=sum(histogram.values()),
        op_histogram=histogram,
        parameter_count=count,
        parameter_bytes=nbytes,
        external_data_bytes=external_bytes,
        external_data_files=external_files,
        functions=[_qualified(f.domain, f.name) for f in model.functions],
        metadata={p.key: p.value for p in model.metadata_props},
        path=path,
    )


def op_histogram(model: ModelProto) -> dict[str, int]:
    """Node count per operator over all graphs and subgraphs, most frequent first.

    Operators outside the default domain are written as in the ONNX text syntax: ``com.microsoft.Attention``.
    """
    ops = Counter((node.domain, node.op_type) for node in iter_nodes(model))  # named once per op, not per node
    counts = Counter[str]()
    for (domain, op_type), count in ops.items():
        counts[_qualified(domain, op_type)] += count
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _qualified(domain: str, name: str) -> str:
    return name if domain in _DEFAULT_DOMAINS else f"{domain}.{name}"


def _specs(values: Iterable[ValueInfoProto], skip: set[str]) -> list[TensorSpec]:
    """Graph inputs/outputs; inputs that are initializers (old IR style) are weights, not inputs."""
    return [TensorSpec(v.name, type_name(v.type), _shape(v.type)) for v in values if v.name not in skip]


def type_name(type_proto: TypeProto) -> str:
    """``float``, ``seq(int64)``, ``map(string,float)``, ``optional(float)``, ... for an ONNX type."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        name = dtype_name(getattr(type_proto, kind).elem_type).lower()
        return name if kind == "tensor_type" else f"sparse({name})"
    if kind == "sequence_type":
        return f"seq({type_name(type_proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_name(type_proto.optional_type.elem_type)})"
    if kind == "map_type":
        key = dtype_name(type_proto.map_type.key_type).lower()
        return f"map({key},{type_name(type_proto.map_type.value_type)})"
    return "unknown"


def _shape(type_proto: TypeProto) -> list[int | str | None] | None:
    kind = type_proto.WhichOneof("value")
    if kind not in ("tensor_type", "sparse_tensor_type"):
        return None
    tensor_type = getattr(type_proto, kind)
    if not tensor_type.HasField("shape"):
        return None
    return [_dim(d) for d in tensor_type.shape.dim]


def _dim(dim: TensorShapeProto.Dimension) -> int | str | None:
    kind = dim.WhichOneof("value")
    if kind == "dim_value":
        return dim.dim_value
    if kind == "dim_param":
        return dim.dim_param
    return None


def _parameters(model: ModelProto) -> tuple[int, int]:
    """Element count and bytes of all initializers and Constant-node values, in every graph."""
    count = nbytes = 0
    for graph, _ in iter_graphs(model):
        for tensor in graph.initializer:
            count, nbytes = count + element_count(tensor), nbytes + declared_nbytes(tensor)
        for sparse in graph.sparse_initializer:
            count, nbytes = count + element_count(sparse.values), nbytes + declared_nbytes(sparse.values)
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in _DEFAULT_DOMAINS:
                c, b = _constant_size(node.attribute)
                count, nbytes = count + c, nbytes + b
    return count, nbytes


def _constant_size(attributes: Iterable[AttributeProto]) -> tuple[int, int]:
    """Element count and bytes of a Constant node's value, whichever attribute holds it."""
    for attr in attributes:
        if attr.name == "value":
            return element_count(attr.t), declared_nbytes(attr.t)
        if attr.name == "sparse_value":
            return element_count(attr.sparse_tensor.values), declared_nbytes(attr.sparse_tensor.values)
        if attr.name in _CONSTANT_NUMBERS:
            field_name, itemsize = _CONSTANT_NUMBERS[attr.name]
            n = len(getattr(attr, field_name)) if attr.name.endswith("s") else 1
            return n, n * itemsize
        if attr.name == "value_string":
            return 1, len(attr.s)
        if attr.name == "value_strings":
            return len(attr.strings), sum(map(len, attr.strings))
    return 0, 0


def _external_data(model: ModelProto, model_file: str | None) -> tuple[int, list[str]]:
    """Bytes stored in external files, and the files' locations (relative to the model); a weight a weightless
    load left in ``model_file`` itself is inline."""
    total, files = 0, set[str]()
    for tensor in tensor_protos(model):
        if is_external(tensor) and not (model_file and _location(tensor) == model_file):
            total += declared_nbytes(tensor)
            files.update(e.value for e in tensor.external_data if e.key == "location")
    return total, sorted(files)


def _location(tensor: TensorProto) -> str | None:
    return next((e.value for e in tensor.external_data if e.key == "location"), None)
