"""Built-in op profilers: MACs of MatMul, Gemm and Conv from static shapes.

Registered like any plugin, through ``gsrewrite_profile_op``. A profiler returns ``None`` (unknown MACs)
rather than guess when a shape it needs is not static.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gsrewrite.plugin_api import OpCost, OpProfiler, hookimpl

if TYPE_CHECKING:
    import onnx_graphsurgeon as gs

Shape = tuple[int, ...]


def static_shape(tensor: Any) -> Shape | None:
    """The shape of a graphsurgeon tensor when every dimension is a known int, else ``None``."""
    shape = getattr(tensor, "shape", None)
    if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    return tuple(shape)


def _params(node: gs.Node) -> int:
    import onnx_graphsurgeon as gs

    return sum(math.prod(t.shape) for t in node.inputs if isinstance(t, gs.Constant))


def _matmul_out_shape(a: Shape, b: Shape) -> Shape | None:
    if not a or not b or a[-1] != (b[0] if len(b) == 1 else b[-2]):
        return None
    a_batch, rows = (a[:-2], a[-2:-1]) if len(a) > 1 else ((), ())
    b_batch, cols = (b[:-2], b[-1:]) if len(b) > 1 else ((), ())
    try:
        batch = _broadcast(a_batch, b_batch)
    except ValueError:
        return None
    return (*batch, *rows, *cols)


def _broadcast(x: Shape, y: Shape) -> Shape:
    import numpy as np

    return tuple(np.broadcast_shapes(x, y))


def profile_matmul(node: gs.Node, context: Any) -> OpCost | None:
    """MACs = (elements of the output) * K, where K is the contracted dimension."""
    a, b = (static_shape(t) for t in node.inputs[:2])
    out = _matmul_out_shape(a, b) if a and b else None
    if out is None or a is None:
        return OpCost(macs=None, params=_params(node))
    return OpCost(macs=math.prod(out) * a[-1], params=_params(node))


def profile_gemm(node: gs.Node, context: Any) -> OpCost | None:
    """MACs = M * N * K of ``alpha * A' @ B' + beta * C`` (the bias add is not counted)."""
    a, b = (static_shape(t) for t in node.inputs[:2])
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return OpCost(macs=None, params=_params(node))
    m, k = a[::-1] if node.attrs.get("transA", 0) else a
    n = b[0] if node.attrs.get("transB", 0) else b[1]
    return OpCost(macs=m * n * k, params=_params(node))


def _conv_out_spatial(node: gs.Node, x: Shape, w: Shape) -> Shape | None:
    spatial, kernel = x[2:], w[2:]
    rank = len(spatial)
    strides = node.attrs.get("strides", [1] * rank)
    dilations = node.attrs.get("dilations", [1] * rank)
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return tuple(-(-size // s) for size, s in zip(spatial, strides, strict=True))
    pads = [0] * (2 * rank) if auto_pad == "VALID" else node.attrs.get("pads", [0] * (2 * rank))
    return tuple(
        (size + pads[i] + pads[i + rank] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1
        for i, size in enumerate(spatial)
    )


def profile_conv(node: gs.Node, context: Any) -> OpCost | None:
    """MACs = (elements of the output) * (input channels per group) * (kernel elements)."""
    x, w = (static_shape(t) for t in node.inputs[:2])
    if x is None or w is None or len(x) != len(w) or len(x) < 3:
        return OpCost(macs=None, params=_params(node))
    spatial = _conv_out_spatial(node, x, w)
    out = static_shape(node.outputs[0]) or ((x[0], w[0], *spatial) if spatial is not None else None)
    if out is None:
        return OpCost(macs=None, params=_params(node))
    return OpCost(macs=math.prod(out) * math.prod(w[1:]), params=_params(node))


#: op type (default ONNX domain) -> profiler.
PROFILERS: dict[str, OpProfiler] = {
    "MatMul": profile_matmul,
    "Gemm": profile_gemm,
    "Conv": profile_conv,
}


def _is_default_domain(domain: str | None) -> bool:
    return domain in (None, "", "ai.onnx")


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    """Profile the standard ops in :data:`PROFILERS`; ``None`` for every other op."""
    profiler = PROFILERS.get(node.op) if _is_default_domain(node.domain) else None
    return profiler(node, context) if profiler is not None else None
