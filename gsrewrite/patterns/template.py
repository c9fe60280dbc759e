"""Template graphs: the parsed form of a pattern's ``match`` and ``replace`` text.

A template is read from the ONNX textual syntax (``onnx.parser.parse_graph``) and turned into a small,
immutable structure the matcher walks. The conventions (see docs/writing_patterns.md):

* graph inputs are wildcards: they bind any tensor (the same name twice binds one tensor);
* graph initializers are constants the graph must hold, value within a tolerance (a scalar matches any
  constant whose elements all equal it);
* attributes written with a value must match; ``attr = @name`` captures the value under ``name``; attributes
  not written are free;
* ``[label]`` before a node names it, for ``--explain`` and for attribute inheritance in the replacement;
* ops in the ``alt`` domain call a fragment: a named set of alternative subgraphs (see fragments.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

from gsrewrite.errors import PatternError

#: The domain of fragment calls in templates: ``y = alt.Square(x)``.
FRAGMENT_DOMAIN = "alt"


@dataclass(frozen=True)
class Capture:
    """An attribute written as ``attr = @name``: its value is captured under ``name``.

    ``type`` is the AttributeProto type when the template annotates it (``epsilon: float = @eps``), else 0.
    """

    name: str
    type: int = 0


@dataclass
class TNode:
    """One template node. ``inputs``/``outputs`` are tensor names ('' = omitted optional input)."""

    op: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    label: str

    @property
    def is_fragment_call(self) -> bool:
        return self.domain == FRAGMENT_DOMAIN


@dataclass
class TemplateGraph:
    """A parsed template: wildcards (inputs), outputs, required constants and nodes."""

    name: str
    inputs: list[str]
    outputs: list[str]
    constants: dict[str, np.ndarray]
    nodes: list[TNode]
    producer: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reindex()

    def reindex(self) -> None:
        """Recompute the producer and consumer maps after the node list changed."""
        self.producer = {}
        self.consumers = {}
        for i, node in enumerate(self.nodes):
            for out in node.outputs:
                if out:
                    self.producer[out] = i
            for j, name in enumerate(node.inputs):
                if name:
                    self.consumers.setdefault(name, []).append((i, j))

    @property
    def intermediates(self) -> set[str]:
        """Tensors produced inside the template that are not template outputs."""
        return set(self.producer) - set(self.outputs)

    def labels(self) -> list[str]:
        return [n.label for n in self.nodes]


def normalize_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def attribute_value(attr: onnx.AttributeProto) -> Any:
    """A Python value for an attribute, comparable with ``==`` (lists become tuples, tensors arrays)."""
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (list, tuple)):
        return tuple(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value)
    return value


def parse_template(text: str, where: str) -> TemplateGraph:
    """Parse one template graph written in the ONNX textual syntax; ``where`` names it in errors."""
    try:
        graph = onnx.parser.parse_graph(text)
    except Exception as exc:  # onnx raises its own ParseError with a multi-line message
        detail = " ".join(str(exc).replace("\\n", " ").split())[:200]
        raise PatternError(f"{where}: cannot parse template: {detail}") from None
    nodes = [_tnode(node, i, where) for i, node in enumerate(graph.node)]
    if not nodes:
        raise PatternError(f"{where}: template has no nodes")
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in constants]
    template = TemplateGraph(graph.name, inputs, [o.name for o in graph.output], constants, nodes)
    _check_wellformed(template, where)
    return template


def _tnode(node: onnx.NodeProto, index: int, where: str) -> TNode:
    attrs: dict[str, Any] = {}
    for attr in node.attribute:
        attrs[attr.name] = Capture(attr.ref_attr_name, attr.type) if attr.ref_attr_name else attribute_value(attr)
    label = node.name or f"{node.op_type}#{index}"
    return TNode(node.op_type, normalize_domain(node.domain), list(node.input), list(node.output), attrs, label)


def _check_wellformed(t: TemplateGraph, where: str) -> None:
    known = set(t.inputs) | set(t.constants)
    for node in t.nodes:
        for out in node.outputs:
            if out in known:
                raise PatternError(f"{where}: tensor {out!r} is produced twice (or is also an input)")
            if out:
                known.add(out)
    for node in t.nodes:
        for name in node.inputs:
            if name and name not in known:
                raise PatternError(f"{where}: node {node.label!r} uses {name!r}, which nothing defines")
    for out in t.outputs:
        if out not in t.producer:
            raise PatternError(f"{where}: output {out!r} is not produced by a node")
    labels = [n.label for n in t.nodes]
    dupes = {x for x in labels if labels.count(x) > 1}
    if dupes:
        raise PatternError(f"{where}: node labels used twice: {', '.join(sorted(dupes))}")
