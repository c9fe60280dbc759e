"""The built-in simplify passes, one module each; :func:`builtin_passes` lists them in pipeline order.

The order matters only for speed (the driver repeats rounds until nothing changes): cheap eliminations
first, then folding, deduplication before common-subexpression elimination (equal constants must be one
tensor for CSE to see equal nodes), shape folding once duplicated shape chains are merged, dead code last.
"""

from __future__ import annotations

from gsrewrite.simplifier.passes.base import SimplifyPass
from gsrewrite.simplifier.passes.cse import EliminateCommonSubexpressions
from gsrewrite.simplifier.passes.dead_code import EliminateDeadCode
from gsrewrite.simplifier.passes.dedup_constants import DeduplicateConstants
from gsrewrite.simplifier.passes.downcast import Downcast
from gsrewrite.simplifier.passes.fold_constants import FoldConstants
from gsrewrite.simplifier.passes.fold_pad import FoldPad
from gsrewrite.simplifier.passes.fold_shapes import FoldShapes
from gsrewrite.simplifier.passes.inline_if import InlineConstantIf
from gsrewrite.simplifier.passes.merge_arith import MergeConstantArith
from gsrewrite.simplifier.passes.merge_casts import MergeCasts
from gsrewrite.simplifier.passes.merge_reshapes import MergeReshapes
from gsrewrite.simplifier.passes.merge_squeezes import MergeSqueezes
from gsrewrite.simplifier.passes.merge_transposes import MergeTransposes
from gsrewrite.simplifier.passes.noops import EliminateNoops
from gsrewrite.simplifier.passes.reshape_transpose import MergeReshapeTranspose

__all__ = ["SimplifyPass", "builtin_passes"]


def builtin_passes() -> list[SimplifyPass]:
    """A fresh instance of every built-in pass implemented in Python, in pipeline order (the pattern
    passes, which need pattern files, are added by the built-in plugin)."""
    return [
        EliminateNoops(),
        FoldConstants(),
        InlineConstantIf(),
        DeduplicateConstants(),
        EliminateCommonSubexpressions(),
        FoldShapes(),
        MergeReshapeTranspose(),
        MergeTransposes(),
        MergeReshapes(),
        MergeSqueezes(),
        MergeCasts(),
        FoldPad(),
        MergeConstantArith(),
        EliminateDeadCode(),
        Downcast(),
    ]
