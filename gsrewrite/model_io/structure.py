"""Structural checks of a model's graphs: single assignment, no dangling references, no cycles.

:func:`check_structure` runs on load and again after every rewrite. It walks the main graph, every
If/Loop/Scan subgraph (which may read values of the enclosing graphs, the *outer scope*) and every
model-local function body, and raises :class:`~gsrewrite.errors.InvalidModelError` naming the first
offending graph, node and tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from onnx import FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto

from gsrewrite.errors import InvalidModelError
from gsrewrite.model_io.graph_walk import may_hold_graphs, node_label, node_subgraphs


@dataclass(frozen=True)
class _Body:
    """What the checks need from a graph or a function body."""

    where: str
    nodes: Sequence[NodeProto]
    inputs: Sequence[str]
    outputs: Sequence[str]
    initializers: Sequence[str] = field(default_factory=tuple)
    nested: bool = False  # a subgraph, which may read values of enclosing graphs

    @classmethod
    def of_graph(cls, graph: GraphProto, where: str, nested: bool = False) -> _Body:
        inits = [t.name for t in graph.initializer] + [s.values.name for s in graph.sparse_initializer]
        inputs, outputs = [v.name for v in graph.input], [v.name for v in graph.output]
        return cls(where, graph.node, inputs, outputs, inits, nested)

    @classmethod
    def of_function(cls, function: FunctionProto) -> _Body:
        where = (
            f"function '{function.domain}.{function.name}'"
            if function.domain
            else f"function '{function.name}'"
        )
        return cls(where, function.node, function.input, function.output)


def check_structure(model: ModelProto) -> None:
    """Raise InvalidModelError unless every graph of the model is a well-formed DAG.

    Checked in the main graph, all subgraphs and all function bodies: no name is produced twice (by two
    nodes, or by a node and a graph input/initializer); graph inputs, initializers and outputs are not
    listed twice; every node input and graph output is a graph input, an initializer, a node output, or
    (in subgraphs) a value of an enclosing graph; the nodes form no cycle (subgraph reads count as
    inputs of the node holding the subgraph).
    """
    if not model.HasField("graph"):
        raise InvalidModelError("the model has no graph")
    _check_body(_Body.of_graph(model.graph, "the main graph"), frozenset())
    for function in model.functions:
        _check_body(_Body.of_function(function), frozenset())


def _check_body(body: _Body, outer: frozenset[str]) -> set[str]:
    """Check one graph; return the outer-scope names it reads."""
    declared = _declared_names(body)
    producers = _producers(body, declared)
    local: frozenset[str] | None = None  # names visible to subgraphs: built when the first one is met
    free: set[str] = set()
    nested: dict[int, list[str]] = {}  # node -> the outer names its subgraphs read
    ordered = True  # every read produced by an earlier node: the order is topological, so no cycle
    for i, node in enumerate(body.nodes):
        reads: Sequence[str] = node.input
        if may_hold_graphs(node):
            for attr_name, sub in node_subgraphs(node):
                if local is None:
                    local = outer | declared | producers.keys()
                where = f"subgraph '{attr_name}' of node {node_label(node, i)} in {body.where}"
                nested.setdefault(i, []).extend(sorted(_check_body(_Body.of_graph(sub, where, nested=True), local)))
            if i in nested:
                reads = [*reads, *nested[i]]
        for name in reads:
            if not name:
                continue
            producer = producers.get(name)
            if producer is not None:
                if producer >= i:
                    ordered = False
            elif name not in declared:
                _require_outer(name, outer, f"node {node_label(node, i)} in {body.where} reads", body)
                free.add(name)
    _check_outputs(body, declared, producers, outer, free)
    if not ordered:  # (no list of dependencies is built for the graphs in order: every exporter's)
        deps = [{producers[name] for name in (*node.input, *nested.get(i, ())) if name in producers}
                for i, node in enumerate(body.nodes)]
        _check_acyclic(body, deps)
    return free


Path = tuple[tuple[str, int | None], ...]
_FIELD_WORDS = {"name": "a name", "input": "an input name", "output": "an output name", "op_type": "an op type",
                "domain": "a domain", "doc_string": "a doc string"}
_LISTS = {"node": "node", "initializer": "initializer", "input": "graph input", "output": "graph output",
          "value_info": "value_info entry"}


#: serialized models up to this size are checked by one parse as proto3 (see :func:`check_text`)
UTF8_PARSE_LIMIT = 64 << 20


def check_text(model: ModelProto, serialized: bytes | memoryview | None = None) -> None:
    """Raise InvalidModelError naming the first string field (a node, tensor or graph name, ...) that is not
    valid UTF-8. Python protobuf parses such fields as ``bytes``; they could not be written back.

    With the model's ``serialized`` bytes (up to :data:`UTF8_PARSE_LIMIT`), they are parsed once as the same
    messages declared proto3, whose parser rejects a string field that is not UTF-8: a valid model is then
    checked without reading its fields from Python (benchmarks/results/code_figures.md); a
    rejected one is walked to name the field."""
    if serialized is not None and len(serialized) <= UTF8_PARSE_LIMIT and _strings_valid(serialized):
        return
    found = _first_invalid(model, ())
    if found is not None:
        raise InvalidModelError(_describe(*found))


def _strings_valid(serialized: bytes | memoryview) -> bool:
    """Whether every string field of the serialized ModelProto is UTF-8 (False also when this cannot tell)."""
    checker = _proto3_model()
    if checker is None:
        return False
    try:
        checker.FromString(serialized)
    except Exception:  # bad UTF-8 (or anything else the proto3 parser refuses): the walk decides
        return False
    return True


@functools.cache
def _proto3_model() -> Any:
    """onnx's ModelProto (and every message it holds) declared proto3 in a pool of its own: upb validates the
    UTF-8 of proto3 string fields while parsing, in C. None when onnx's descriptors cannot be restated so."""
    try:
        proto = descriptor_pb2.FileDescriptorProto()
        ModelProto.DESCRIPTOR.file.CopyToProto(proto)
        if proto.dependency or proto.HasField("edition"):
            return None
        old, new = f".{proto.package}.", ".gsrewrite_utf8_check."
        proto.name, proto.package, proto.syntax = "gsrewrite_utf8_check/onnx.proto", new.strip("."), "proto3"

        def restate(messages: Any) -> None:
            for message in messages:
                message.ClearField("extension_range")
                for f in message.field:
                    f.ClearField("default_value")
                    if f.label == f.LABEL_REQUIRED:
                        f.label = f.LABEL_OPTIONAL
                    if f.type_name.startswith(old):
                        f.type_name = new + f.type_name[len(old):]
                restate(message.nested_type)

        restate(proto.message_type)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{new.strip('.')}.ModelProto"))
    except Exception:  # a descriptor proto3 cannot state: the walk checks every model
        return None


def _first_invalid(message: Any, path: Path) -> tuple[Path, bytes] | None:
    if isinstance(message, TensorProto):  # never list its fields: that would copy the tensor's data
        return _first_invalid_in_tensor(message, path)
    if _NODE_FIELDS_KNOWN and isinstance(message, NodeProto):  # the most numerous message: read directly
        return _first_invalid_in_node(message, path)
    for descriptor, value in message.ListFields():
        items = list(enumerate(value)) if descriptor.is_repeated else [(None, value)]
        if descriptor.type == FieldDescriptor.TYPE_STRING:
            bad = next(((i, v) for i, v in items if isinstance(v, bytes)), None)
            if bad is not None:
                return (*path, (descriptor.name, bad[0])), bad[1]
        elif descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            for i, item in items:
                found = _first_invalid(item, (*path, (descriptor.name, i)))
                if found is not None:
                    return found
    return None


_NODE_STRINGS = ("name", "op_type", "domain", "overload", "doc_string")
_NODE_MESSAGES = ("attribute", "metadata_props", "device_configurations")
#: the fast path knows every field of this onnx's NodeProto (a newer field: the generic walk)
_NODE_FIELDS_KNOWN = {f.name for f in NodeProto.DESCRIPTOR.fields} <= {"input", "output", *_NODE_STRINGS,
                                                                        *_NODE_MESSAGES}


def _first_invalid_in_node(node: NodeProto, path: Path) -> tuple[Path, bytes] | None:
    for kind in ("input", "output"):
        values = getattr(node, kind)
        for i, value in enumerate(values):
            if isinstance(value, bytes):
                return (*path, (kind, i)), value
    for name in _NODE_STRINGS:
        value = getattr(node, name)
        if isinstance(value, bytes):
            return (*path, (name, None)), value
    for kind in _NODE_MESSAGES:
        for i, item in enumerate(getattr(node, kind, ())):
            found = _first_invalid(item, (*path, (kind, i)))
            if found is not None:
                return found
    return None


def _first_invalid_in_tensor(tensor: TensorProto, path: Path) -> tuple[Path, bytes] | None:
    for name in ("name", "doc_string"):
        if isinstance(getattr(tensor, name), bytes):
            return (*path, (name, None)), getattr(tensor, name)
    for kind in ("external_data", "metadata_props"):
        for i, entry in enumerate(getattr(tensor, kind)):
            found = _first_invalid(entry, (*path, (kind, i)))
            if found is not None:
                return found
    return None


def _describe(path: Path, value: bytes) -> str:
    shown = repr(value[:40]) + ("..." if len(value) > 40 else "")
    if len(path) == 3 and path[0][0] == "graph" and path[1][0] in _LISTS and path[2][0] in _FIELD_WORDS:
        (_, _), (kind, index), (name, _) = path
        return f"{_LISTS[kind]} {index} has {_FIELD_WORDS[name]} that is not valid UTF-8 ({shown})"
    where = ".".join(name if index is None else f"{name}[{index}]" for name, index in path)
    return f"model field {where} is not valid UTF-8 ({shown})"


def _require_outer(name: str, outer: frozenset[str], subject: str, body: _Body) -> None:
    if name not in outer:
        known = "a graph input, an initializer"
        if body.nested:
            known += ", the output of any node or a value of an enclosing graph"
        else:
            known += " or the output of any node"
        raise InvalidModelError(f"{subject} '{name}', which is not {known}")


def _declared_names(body: _Body) -> set[str]:
    for kind, names in (("input", body.inputs), ("initializer", body.initializers)):
        duplicate = _first_duplicate(names)
        if duplicate is not None:
            raise InvalidModelError(f"{body.where} lists {kind} '{duplicate}' twice")
    return set(body.inputs) | set(body.initializers)


def _producers(body: _Body, declared: set[str]) -> dict[str, int]:
    producers: dict[str, int] = {}
    for i, node in enumerate(body.nodes):
        for name in node.output:
            if not name:
                continue
            if name in producers:
                first = node_label(body.nodes[producers[name]], producers[name])
                raise InvalidModelError(
                    f"tensor '{name}' in {body.where} is produced by two nodes, "
                    f"{first} and {node_label(node, i)}"
                )
            if name in declared:
                raise InvalidModelError(
                    f"node {node_label(node, i)} in {body.where} produces '{name}', "
                    "which is already a graph input or initializer"
                )
            producers[name] = i
    return producers


def _check_outputs(
    body: _Body, declared: set[str], producers: dict[str, int], outer: frozenset[str], free: set[str]
) -> None:
    duplicate = _first_duplicate(body.outputs)
    if duplicate is not None:
        raise InvalidModelError(f"{body.where} lists output '{duplicate}' twice")
    for name in body.outputs:
        if name not in producers and name not in declared:
            _require_outer(name, outer, f"{body.where} lists output", body)
            free.add(name)


def _first_duplicate(names: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _check_acyclic(body: _Body, deps: list[set[int]]) -> None:
    """Kahn's algorithm; on failure, name one cycle among the nodes left over."""
    consumers: list[list[int]] = [[] for _ in deps]
    for i, producers in enumerate(deps):
        for p in producers:
            consumers[p].append(i)
    pending = [len(d) for d in deps]
    ready = [i for i, n in enumerate(pending) if n == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for c in consumers[i]:
            pending[c] -= 1
            if pending[c] == 0:
                ready.append(c)
    if done < len(deps):
        cycle = _one_cycle(deps, {i for i, n in enumerate(pending) if n > 0})
        path = " -> ".join(node_label(body.nodes[i], i) for i in cycle)
        raise InvalidModelError(f"{body.where} is not acyclic: nodes {path} form a cycle")


def _one_cycle(deps: list[set[int]], left: set[int]) -> list[int]:
    """Every left-over node depends on another left-over node, so walking dependencies must loop."""
    order: dict[int, int] = {}
    walk: list[int] = []
    current = min(left)
    while current not in order:
        order[current] = len(walk)
        walk.append(current)
        current = min(d for d in deps[current] if d in left)
    cycle = walk[order[current] :][::-1]
    return [*cycle, cycle[0]]
