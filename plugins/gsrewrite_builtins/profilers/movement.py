"""Ops that move, copy or index data and compute nothing: 0 MACs (their memory traffic is in the profile's
activation bytes)."""

from __future__ import annotations

from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import OpCost, hookimpl
from gsrewrite_builtins.profilers import cost, is_standard

ZERO_COST = frozenset({
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Split", "Slice", "Gather",
    "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Scatter", "Expand", "Tile", "Pad", "Identity",
    "Cast", "CastLike", "Shape", "Size", "Constant", "ConstantOfShape", "Range", "Dropout", "DepthToSpace",
    "SpaceToDepth", "Trilu", "OneHot", "NonZero", "ReverseSequence", "EyeLike", "Compress", "Unique",
    "SequenceConstruct", "SequenceAt",
    "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement",
})


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    return cost(node, 0) if is_standard(node) and node.op in ZERO_COST else None
