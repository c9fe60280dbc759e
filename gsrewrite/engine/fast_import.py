"""``gs.import_onnx`` for the common case, without its per-object overhead (same graph, about twice as fast).

onnx-graphsurgeon's importer builds every tensor and node through property setters and helper functions that
look up the same type tables again for each value (``get_numpy_type`` rebuilds the list of all ONNX types per
call): for a 600-node export with 1000 typed tensors that is ~20 ms, more than all the simplify passes that
follow. This importer creates the same objects (``Variable``, ``Constant`` with ``LazyValues``, ``Node`` with
synchronized input/output lists, ``Graph``) directly, for models whose graph uses only what it knows:

- no subgraphs (If/Loop/Scan bodies), no model-local functions, no sparse initializers;
- attributes of the plain kinds (float, int, string, tensor and their lists), no attribute references;
- value types with a NumPy dtype (no bfloat16 / float8, which onnx-graphsurgeon keeps as ONNX type codes).

Anything else goes to ``gs.import_onnx`` unchanged. ``tests/test_fast_import.py`` checks on every fixture
model that both importers give the same graph, tensor by tensor.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import AttributeProto
from onnx_graphsurgeon.importers import onnx_importer as gs_importer
from onnx_graphsurgeon.ir.tensor import LazyValues
from onnx_graphsurgeon.util.misc import SynchronizedList

_A = AttributeProto
_PLAIN_ATTRIBUTES = frozenset({_A.FLOAT, _A.INT, _A.STRING, _A.TENSOR, _A.FLOATS, _A.INTS, _A.STRINGS})


class _Unsupported(Exception):
    """The model needs onnx-graphsurgeon's own importer."""


def import_onnx(model: onnx.ModelProto) -> gs.Graph:
    """The graph ``gs.import_onnx(model)`` returns, built faster when the model allows it (see module docs)."""
    graph = model.graph
    if model.functions or graph.sparse_initializer:
        return gs.import_onnx(model)
    try:
        return _import(model)
    except _Unsupported:
        return gs.import_onnx(model)


def _import(model: onnx.ModelProto) -> gs.Graph:
    graph = model.graph
    tensors: dict[str, gs.Tensor] = {}
    for initializer in graph.initializer:
        if initializer.name not in tensors:
            tensors[initializer.name] = _constant(initializer)
    for info in graph.value_info:
        existing = tensors.get(info.name)
        if existing is None:
            tensors[info.name] = _variable(info)
        elif isinstance(existing, gs.Variable):  # a repeated entry: onnx-graphsurgeon's rule, quirks included
            dtype, shape = _typed(info)[:2] if info.type.ByteSize() > 0 else (None, None)
            existing.dtype = existing.dtype or dtype
            existing.shape = existing.shape or shape
    initializer_names = {t.name for t in graph.initializer}
    inputs = [_get_or_import(tensors, vi) for vi in graph.input if vi.name not in initializer_names]
    outputs = [_get_or_import(tensors, vi) for vi in graph.output]
    nodes = [_node(node, tensors) for node in graph.node]
    return gs.Graph(nodes=nodes, inputs=inputs, outputs=outputs, name=graph.name, doc_string=graph.doc_string,
                    producer_name=model.producer_name, producer_version=model.producer_version,
                    opset=gs_importer.OnnxImporter.get_opset(model), import_domains=model.opset_import,
                    functions=[], ir_version=model.ir_version)


def _get_or_import(tensors: dict[str, gs.Tensor], info: onnx.ValueInfoProto) -> gs.Tensor:
    tensor = tensors.get(info.name)
    if tensor is None:
        tensor = tensors[info.name] = _variable(info)
    return tensor


def _node(proto: onnx.NodeProto, tensors: dict[str, gs.Tensor]) -> gs.Node:
    node = object.__new__(gs.Node)
    state = node.__dict__
    state["op"] = proto.op_type
    state["name"] = proto.name
    state["attrs"] = _attributes(proto.attribute) if proto.attribute else OrderedDict()
    state["inputs"] = _synced(node, "outputs", [_named(tensors, name) for name in proto.input])
    state["outputs"] = _synced(node, "inputs", [_named(tensors, name) for name in proto.output])
    state["domain"] = proto.domain if proto.HasField("domain") else None
    return node


def _synced(parent: Any, field: str, items: Any) -> SynchronizedList:
    """``SynchronizedList(parent, field, items)`` without its per-item method calls: the items are stored and
    ``parent`` is appended to each item's ``field`` list (what the list's ``extend`` does, item by item)."""
    synced = list.__new__(SynchronizedList)
    synced.parent_obj = parent
    synced.field_name = field
    if items:
        list.extend(synced, items)
        for item in items:
            list.append(getattr(item, field), parent)
    return synced


def _named(tensors: dict[str, gs.Tensor], name: str) -> gs.Tensor:
    tensor = tensors.get(name)
    if tensor is None:
        if not name:
            return _bare_variable("")  # an omitted optional input/output: not tracked
        tensor = tensors[name] = _bare_variable(name)
    return tensor


def _attributes(attributes: Any) -> OrderedDict:
    values: OrderedDict = OrderedDict()
    for attr in attributes:
        kind = attr.type
        if kind not in _PLAIN_ATTRIBUTES or attr.ref_attr_name:
            raise _Unsupported
        if kind == _A.INT:
            values[attr.name] = attr.i
        elif kind == _A.INTS:
            values[attr.name] = list(attr.ints)
        elif kind == _A.FLOAT:
            values[attr.name] = attr.f
        elif kind == _A.FLOATS:
            values[attr.name] = list(attr.floats)
        elif kind == _A.STRING:
            values[attr.name] = _text(attr.s)
        elif kind == _A.STRINGS:
            values[attr.name] = [_text(s) for s in attr.strings]
        else:
            values[attr.name] = _constant(attr.t)
    return values


def _text(value: bytes) -> str | bytes:
    """A string attribute as text; binary payloads (an EPContext engine cache) stay bytes and export unchanged."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value


def _bare_variable(name: str, dtype: Any = None, shape: Any = None, kind: str | None = "tensor_type"
                   ) -> gs.Variable:
    tensor = object.__new__(gs.Variable)
    state = tensor.__dict__
    state["name"] = name
    state["inputs"] = _synced(tensor, "outputs", ())
    state["outputs"] = _synced(tensor, "inputs", ())
    state["dtype"] = dtype
    state["shape"] = shape
    state["type"] = kind
    return tensor


def _variable(info: onnx.ValueInfoProto) -> gs.Variable:
    if info.type.ByteSize() == 0:  # a subgraph-style entry without a type
        return _bare_variable(info.name)
    return _bare_variable(info.name, *_typed(info))


def _typed(info: onnx.ValueInfoProto) -> tuple[Any, Any, str | None]:
    """(dtype, shape, type name) as onnx-graphsurgeon reads them from a value info."""
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        return (gs_importer.get_onnx_tensor_dtype(info), gs_importer.get_onnx_tensor_shape(info),
                gs_importer.get_onnx_tensor_type(info))
    tensor_type = info.type.tensor_type
    dtype = _numpy_dtype(tensor_type.elem_type)
    if tensor_type.HasField("shape"):
        shape: list[Any] | None = []
        for dim in tensor_type.shape.dim:
            which = dim.WhichOneof("value")
            shape.append(dim.dim_param if which == "dim_param" else dim.dim_value if which == "dim_value" else None)
    else:
        shape = None
    return dtype, shape, "tensor_type"


def _constant(proto: onnx.TensorProto) -> gs.Constant:
    itemsize = _itemsize(proto.data_type)
    lazy = object.__new__(LazyValues)
    lazy.tensor = proto
    lazy.shape = proto.dims
    lazy.dtype = _numpy_dtype(proto.data_type)
    lazy.nbytes = math.prod(proto.dims) * itemsize
    tensor = object.__new__(gs.Constant)
    state = tensor.__dict__
    state["name"] = proto.name
    state["inputs"] = _synced(tensor, "outputs", ())
    state["outputs"] = _synced(tensor, "inputs", ())
    state["_values"] = lazy
    state["data_location"] = int(proto.data_location) if proto.HasField("data_location") else None
    state["_export_dtype"] = None
    return tensor


@functools.cache
def _numpy_dtype(elem_type: int) -> np.dtype:
    dtype = gs_importer.get_numpy_type(elem_type)
    if dtype is None:  # bfloat16, float8, ...: onnx-graphsurgeon keeps the ONNX code and warns
        raise _Unsupported
    return dtype


@functools.cache
def _itemsize(data_type: int) -> int:
    _numpy_dtype(data_type)  # the types onnx-graphsurgeon sizes through NumPy only
    size = gs_importer.get_itemsize(data_type)
    if size is None:
        raise _Unsupported
    return size
