"""The contract of a simplify pass, and a base class for the built-in ones.

A pass is any object with ``name``, ``description`` and ``run(graph) -> outcome`` where the outcome has
``graph`` and ``modified`` (:class:`gsrewrite.protocols.GraphPass`; the built-in passes return the one
:class:`~gsrewrite.protocols.PassResult`, as the rewrite engine does). gsrewrite also reads, when present:

* ``outcome.changes`` — how many rewrites the pass made (for the report; default: 1 when modified);
* ``pass_.default`` — False for passes that only run when asked for (``downcast``);
* ``pass_.configure(options)`` — a copy of the pass set up with :class:`SimplifyOptions`.

A pass edits the graph it is given (the main graph or an If/Loop/Scan body) and must leave it in
topological order; the driver runs it on every subgraph too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import onnx_graphsurgeon as gs

from gsrewrite.graph.fold import DEFAULT_MAX_BYTES
from gsrewrite.protocols import PassResult


@dataclass(frozen=True)
class SimplifyOptions:
    """Settings that passes may read through ``configure``."""

    max_fold_bytes: int = DEFAULT_MAX_BYTES


class SimplifyPass:
    """Base of the built-in passes: subclasses set ``name``/``description`` and implement :meth:`apply`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    default: ClassVar[bool] = True

    def run(self, graph: gs.Graph) -> PassResult:
        """Apply the pass to ``graph`` in place and report how many rewrites it made (counted under its name)."""
        changes = self.apply(graph)
        return PassResult(graph, changes > 0, Counter({self.name: changes}) if changes > 0 else Counter())

    def apply(self, graph: gs.Graph) -> int:  # pragma: no cover - abstract
        """Rewrite ``graph`` in place; return the number of rewrites."""
        raise NotImplementedError

    def configure(self, options: SimplifyOptions) -> SimplifyPass:
        """This pass set up for ``options`` (the same object when it has no settings)."""
        return self

    def __repr__(self) -> str:
        return f"<pass {self.name}>"
