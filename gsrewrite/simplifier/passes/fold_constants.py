"""``fold-constants``: nodes computable before run time become constants (see :mod:`gsrewrite.graph.fold`).

Every input constant, or only static shape information needed (``Shape``, ``Size``, ``CastLike``).
Values come from numpy kernels or ``onnx.reference``. A folded tensor is at most ``--max-fold-bytes``
and never much larger than the constants it frees, so Tile/Expand/ConstantOfShape/Range blow-ups stay
nodes and the model never grows. Both limits, and the work of the evaluation, are checked from shapes
before anything is evaluated (:mod:`gsrewrite.graph.fold_cost`); the nodes left alone for
that reason are listed in :attr:`FoldConstants.skipped`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.graph.fold import DEFAULT_MAX_BYTES, fold_constants
from gsrewrite.simplifier.passes.base import SimplifyOptions, SimplifyPass


class FoldConstants(SimplifyPass):
    name = "fold-constants"
    description = "Evaluate nodes whose inputs are constants (size-capped: blow-ups such as Tile stay nodes)."

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        #: node name -> why it was not folded (over --max-fold-bytes, growing the model, too much work, ...)
        self.skipped: dict[str, str] = {}

    def apply(self, graph: gs.Graph) -> int:
        return fold_constants(graph, self.max_bytes, self.skipped)

    def configure(self, options: SimplifyOptions) -> FoldConstants:
        return FoldConstants(options.max_fold_bytes)


def skipped_folds(passes: Iterable[Any]) -> dict[str, str]:
    """The nodes the folding passes among ``passes`` left alone, with the reasons (for the simplify report)."""
    skipped: dict[str, str] = {}
    for pass_ in passes:
        if isinstance(pass_, FoldConstants):
            skipped.update(pass_.skipped)
    return skipped
