"""The interfaces a plugin implements, as :class:`typing.Protocol` classes, and the values they return.

A plugin never has to inherit from these: any object with the right attributes and methods fits
(``isinstance(obj, GraphPass)`` checks the names, not the signatures). They are the contracts behind the
hooks in :mod:`gsrewrite.hookspecs`:

* :class:`ShapeHandler` and :class:`OpProfiler` are what ``gsrewrite_infer_shape`` and
  ``gsrewrite_profile_op`` implementations are: callables of ``(node, context)`` returning ``None`` for
  "not mine". A plugin usually keeps a table ``op_type -> handler`` and looks the node up in its hook.
* :class:`CompressionStrategy` and :class:`GraphPass` are the entries added to the registries passed to
  ``gsrewrite_register_compression_strategies`` and ``gsrewrite_register_passes``; :class:`PassResult` is what
  every built-in pass returns (the simplify passes and the pattern rewrite pass alike).

These are deliberately minimal; fields are added, never removed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import onnx
    import onnx_graphsurgeon as gs

#: A dimension: a size, a symbolic name, or ``None`` when unknown.
Dim = int | str | None
#: ``(dtype, shape)`` of one tensor: a numpy dtype (or ONNX ``TensorProto`` element type) and a shape
#: (``None`` when even the rank is unknown).
TensorType = tuple[Any, Sequence[Dim] | None]


@dataclass(frozen=True)
class OpCost:
    """The cost of running one node.

    ``macs`` is the number of multiply-accumulates (``None`` when the shapes needed are not static);
    ``params`` counts the elements of the node's constant inputs (weights); ``memory_bytes`` is the size of
    the inputs and outputs the node touches, when known.
    """

    macs: int | None
    params: int = 0
    memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class ShapeHandler(Protocol):
    """Infers the output types of a node that standard ONNX shape inference does not know."""

    def __call__(self, node: gs.Node, context: Any) -> Sequence[TensorType] | None:
        """One ``(dtype, shape)`` per node output, or ``None`` when this handler does not apply."""


@runtime_checkable
class OpProfiler(Protocol):
    """Computes the cost of a node."""

    def __call__(self, node: gs.Node, context: Any) -> OpCost | None:
        """The node's cost, or ``None`` when this profiler does not know the op."""


@dataclass(frozen=True)
class Tolerance:
    """How far a compressed model's outputs may be from the original's, per output (compression refuses a
    result whose outputs are further). Each field names the metric it relaxes (``docs/validation.md``):

    * ``min_cosine``: float outputs, cosine similarity at least this;
    * ``max_abs``: float outputs, when given, max absolute error at most this;
    * ``min_agreement``: integer and bool outputs (labels, ids, flags), the share of elements equal to the
      original's at least this (1.0: exact);
    * ``min_top1``: float outputs holding class scores (read by an ArgMax/TopK of the model, a Softmax's output,
      a classifier's logits), when given, the share of rows whose top-1 class is the original's at least this.

    A NaN or infinity where the original's value is finite (or another NaN/inf pattern) fails whatever these are.
    """

    min_cosine: float = 0.999
    max_abs: float | None = None
    min_agreement: float = 1.0
    min_top1: float | None = None


@runtime_checkable
class CompressionStrategy(Protocol):
    """A named way to shrink a model (fp16 weights, int8/int4 weight quantization, ...).

    ``tolerance`` is what validation holds the compressed model to (compression is not exact).
    """

    name: str
    description: str
    tolerance: Tolerance

    def apply(self, model: onnx.ModelProto, **options: Any) -> onnx.ModelProto:
        """Return the compressed model; ``model`` is not modified. Bad options raise ``UsageError``."""


@runtime_checkable
class PassOutcome(Protocol):
    """What a pass returns: the resulting graph and whether it changed anything (:class:`PassResult` is one;
    ``changes``, a count for the report, is read when present)."""

    graph: gs.Graph
    modified: bool


@dataclass
class PassResult:
    """What a pass returns: the graph, whether it changed, and how many rewrites it made (``counts``: by pattern
    for the rewrite pass, under the pass's name for a simplify pass; ``changes`` is their total).

    The rewrite pass also lists each rewrite (``records``), the patterns it could not use with the reason
    (``skipped``), and with ``explain`` what it tried (``tracer``: the near misses).
    """

    graph: gs.Graph
    modified: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    records: list[Any] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    tracer: Any = None

    @property
    def changes(self) -> int:
        """The rewrites made, in all."""
        return sum(self.counts.values())


@runtime_checkable
class GraphPass(Protocol):
    """A named graph transformation (constant folding, identity elimination, ...)."""

    name: str
    description: str

    def run(self, graph: gs.Graph) -> PassOutcome:
        """Transform ``graph`` (in place or not) and report the result."""
