"""A found match, as named checks, computations and the replace step see it.

Everything is reached by *name*: the template's tensor names, node labels and capture names. A check or
computation must not edit the graph; a computation may reject a match by raising :class:`CheckFailed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from gsrewrite.errors import PatternError
from gsrewrite.graph.core import constant_values
from gsrewrite.patterns.contract import Reads, declared, strict

if TYPE_CHECKING:
    from gsrewrite.patterns.pattern import Pattern, Variant
    from gsrewrite.patterns.template import TemplateGraph


class CheckFailed(Exception):
    """Raised by a computation (or check) to reject a match; the message is the reason shown by --explain."""


class UnknownNameError(PatternError, KeyError):
    """A check or computation read a name it did not declare (see :mod:`gsrewrite.patterns.contract`)."""


@dataclass
class Match:
    """Bindings of one match: template tensors, template nodes (by label), captured attribute values."""

    pattern: Pattern
    variant: Variant
    graph: gs.Graph
    tensors: dict[str, gs.Tensor]
    nodes: dict[str, gs.Node]
    captures: dict[str, Any]
    replacement: TemplateGraph
    computed: dict[str, Any] = field(default_factory=dict)
    #: intermediates read outside the match only through Shape/Size: the nodes computing them stay
    kept: frozenset[str] = frozenset()
    #: the check or computation running now, and the names it declared (set by the engine around each call)
    reader: str = ""
    reading: Reads | None = None

    def calling(self, name: str, function: Any) -> Any:
        """Call ``function(self)`` as the check or computation ``name`` (its declared reads are enforced)."""
        self.reader, self.reading = name, declared(function)
        try:
            return function(self)
        finally:
            self.reader, self.reading = "", None

    def _read(self, name: str) -> str:
        if self.reading is not None and name not in self.reading.all and strict():
            raise UnknownNameError(f"pattern {self.pattern.name!r} ({self.pattern.source}): {self.reader} reads "
                                   f"{name!r}, which it does not declare (gsrewrite.plugin_api.reads)")
        if name not in self.pattern.known_names and (self.reading is None or name not in self.reading.optional):
            raise UnknownNameError(f"pattern {self.pattern.name!r} ({self.pattern.source}): "
                                   f"{self.reader or 'a check'} reads {name!r}, which no template of the pattern "
                                   "has (renamed? a name only some patterns have is declared optional)")
        return name

    @property
    def anchor(self) -> gs.Node:
        """The graph node matched by the template's output node."""
        t = self.variant.template
        return self.nodes[t.nodes[t.producer[t.outputs[0]]].label]

    @property
    def opset(self) -> int:
        return int(self.graph.opset)

    def tensor(self, name: str) -> gs.Tensor | None:
        """The graph tensor bound to template tensor ``name`` (None when unbound, e.g. an optional input)."""
        return self.tensors.get(self._read(name))

    def node(self, label: str) -> gs.Node | None:
        return self.nodes.get(self._read(label))

    def constant(self, name: str) -> np.ndarray | None:
        """The value of template tensor ``name`` when it is bound to a constant, else None."""
        tensor = self.tensors.get(self._read(name))
        if isinstance(tensor, gs.Constant):
            return constant_values(tensor)
        return None

    def shape(self, name: str) -> list[int | str | None] | None:
        """The (possibly symbolic) shape of the tensor bound to ``name``, None when unknown."""
        tensor = self.tensors.get(self._read(name))
        if tensor is None or tensor.shape is None:
            return None
        return list(tensor.shape)

    def dtype(self, name: str) -> np.dtype | None:
        tensor = self.tensors.get(self._read(name))
        if tensor is None or tensor.dtype is None:
            return None
        try:
            return np.dtype(tensor.dtype)
        except TypeError:
            return None

    def value(self, name: str) -> Any:
        """A capture, a computed value, or the value of a constant-bound tensor, looked up in that order."""
        self._read(name)
        if name in self.captures:
            return self.captures[name]
        if name in self.computed:
            value = self.computed[name]
            return value.load() if isinstance(value, LazyValues) else value
        const = self.constant(name)
        if const is not None:
            return const
        raise KeyError(f"pattern {self.pattern.name!r}: no capture, computed value or constant named {name!r}")

    def removed_nodes(self) -> list[gs.Node]:
        """The matched nodes the replacement removes: all but those computing ``kept`` intermediates."""
        template = self.variant.template
        keep: set[str] = set()
        pending = list(self.kept)
        while pending:
            name = pending.pop()
            index = template.producer.get(name)
            if index is None or template.nodes[index].label in keep:
                continue
            keep.add(template.nodes[index].label)
            pending.extend(x for x in template.nodes[index].inputs if x in template.producer)
        return [node for label, node in self.nodes.items() if label not in keep]

    def describe(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern.name,
            "variant": self.variant.label,
            "anchor": self.anchor.name,
            "nodes": sorted(n.name for n in self.nodes.values()),
        }
