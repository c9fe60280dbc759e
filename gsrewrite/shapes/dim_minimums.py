"""The smallest sizes of input dims that the graph's ops accept, read off the graph before anything runs.

A reflect ``Pad`` of 64 needs more than 64 elements on its axis (onnxruntime: ``pre-pad (64) exceeds maximum
allowed (15)``); a convolution or a pool needs its padded input at least as wide as its (dilated) window. A VAD
model pads its audio by 64 and convolves it with a 256-wide filter: the 16 samples generated inputs start with
are rejected, 192 are not. Where the dim of such an axis is ``a * s + c`` in one input symbol ``s`` (``a > 0``),
``s`` gets the smallest size that fits; the input planner starts there (:mod:`gsrewrite.validation.dims`). The
bodies of If/Loop/Scan the symbolic walk went through count too (silero's convolutions sit in an If branch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import onnx

from gsrewrite.shapes.rules import Info
from gsrewrite.shapes.symdim import DimValue, Sym
from gsrewrite.shapes.walk import SymbolicShapes

#: ops with a sliding window: kernel from the weight (Conv) or the attribute ``kernel_shape`` (pools)
_WINDOWED = frozenset({"Conv", "MaxPool", "AveragePool", "LpPool"})


def minimum_sizes(graph: onnx.GraphProto, shapes: SymbolicShapes, inputs: set[str]) -> dict[str, int]:
    """Input symbol -> the smallest size the ops of ``graph`` (and the bodies walked) accept, for the symbols of
    ``inputs`` that have one."""
    found: dict[str, int] = {}
    for nodes, tensors in [(graph.node, shapes.tensors), *((body.node, known) for body, known in shapes.bodies)]:
        for symbol, size in _needs(nodes, tensors):
            bound = _smallest(symbol, size, inputs)
            if bound is not None:
                found[bound[0]] = max(found.get(bound[0], 0), bound[1])
    return found


def _needs(nodes: Iterable[onnx.NodeProto], tensors: Mapping[str, Info]) -> Iterable[tuple[DimValue, int]]:
    """(dim, the least size it must have) for each axis of a reflect Pad or a window the ops of ``nodes`` need."""
    for node in nodes:
        if node.domain not in ("", "ai.onnx") or not node.input:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        x = tensors.get(node.input[0])
        shape = x.shape if x is not None else None
        if shape is None:
            continue
        if node.op_type == "Pad" and attrs.get("mode", b"constant") == b"reflect":
            yield from _pad_needs(node, attrs, shape, tensors)
        elif node.op_type in _WINDOWED and attrs.get("auto_pad", b"NOTSET") in (b"NOTSET", b"VALID"):
            yield from _window_needs(node, attrs, shape, tensors)


def _pad_needs(node: onnx.NodeProto, attrs: Mapping[str, object], shape: Sequence[DimValue | None],
               tensors: Mapping[str, Info]) -> Iterable[tuple[DimValue, int]]:
    pads = attrs.get("pads") if "pads" in attrs else _ints(tensors, node.input[1] if len(node.input) > 1 else "")
    axes = _ints(tensors, node.input[3]) if len(node.input) > 3 and node.input[3] else list(range(len(shape)))
    if not isinstance(pads, list) or axes is None or len(pads) != 2 * len(axes):
        return
    for i, axis in enumerate(axes):
        dim = shape[axis] if -len(shape) <= axis < len(shape) else None
        if dim is not None and max(pads[i], pads[i + len(axes)]) > 0:
            yield dim, max(pads[i], pads[i + len(axes)]) + 1  # reflect: at most size - 1 on each side


def _window_needs(node: onnx.NodeProto, attrs: Mapping[str, object], shape: Sequence[DimValue | None],
                  tensors: Mapping[str, Info]) -> Iterable[tuple[DimValue, int]]:
    kernel = attrs.get("kernel_shape")
    if node.op_type == "Conv" and kernel is None and len(node.input) > 1:
        weight = tensors.get(node.input[1])
        kernel = weight.shape[2:] if weight is not None and weight.shape is not None else None
    if not isinstance(kernel, list) or not kernel or len(kernel) > len(shape) - 2:
        return
    spatial = len(kernel)
    pads = attrs.get("pads") or [0] * (2 * spatial)
    dilations = attrs.get("dilations") or [1] * spatial
    if not isinstance(pads, list) or not isinstance(dilations, list) or len(pads) != 2 * spatial:
        return
    for i, k in enumerate(kernel):
        dim = shape[2 + i]
        if dim is not None and isinstance(k, int) and k > 1:
            yield dim, dilations[i] * (k - 1) + 1 - pads[i] - pads[i + spatial]


def _ints(tensors: Mapping[str, Info], name: str) -> list[int] | None:
    """A small integer constant's elements (pads, axes), else None."""
    info = tensors.get(name) if name else None
    value = info.value if info is not None and info.has_value else None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        return None
    return [int(v) for v in value if isinstance(v, int)]


def _smallest(dim: DimValue, size: int, inputs: set[str]) -> tuple[str, int] | None:
    """(s, the least s) for ``dim = a * s + c >= size`` (a > 0, s an input symbol), else None."""
    if isinstance(dim, int) or size <= 1:
        return None
    symbol, a, c = None, 0, 0
    for monomial, coefficient in dim.terms:
        if not monomial:
            c = coefficient
        elif len(monomial) == 1 and isinstance(monomial[0][0], Sym) and monomial[0][1] == 1 and symbol is None:
            symbol, a = monomial[0][0].name, coefficient
        else:
            return None
    if symbol is None or a <= 0 or symbol not in inputs:
        return None
    return symbol, max(-(-(size - c) // a), 1)

