"""Canonicalization: one spelling per operation, so that one template serves every exporter.

Run before matching. Each step is small and semantics-preserving:

* ``Constant`` nodes become constants (initializers), and nodes computable before run time are folded
  (size-capped: see fold.py);
* nodes that change nothing are bypassed (Identity, Cast to the type a tensor already has, a Reshape to the
  input's own shape, ``x * 1``, ...: the ``eliminate-noops`` pass of simplify);
* operands that moved between opsets take their canonical place (axes/split as attributes, Clip bounds
  as inputs) when they are constant;
* attributes left at their default are filled in (a template may then require ``keepdims = 1``);
* axis attributes become negative when the input rank is known (templates write ``axes = [-1]``).

``legalize`` (legalize.py) converts back to what the model's opset allows before the model is saved.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.engine import opforms
from gsrewrite.graph.constant_nodes import constants_from_nodes
from gsrewrite.graph.core import cleanup, constant_values, is_empty, is_sorted, toposort
from gsrewrite.graph.fold import fold_constants
from gsrewrite.graph.noops import bypass_noops

log = logging.getLogger(__name__)


def canonicalize(graph: gs.Graph) -> gs.Graph:
    """Canonicalize ``graph`` in place (top level) and return it, cleaned up and sorted."""
    opset = graph.opset
    constants_from_nodes(graph)
    fold_constants(graph)
    bypass_noops(graph)
    for node in graph.nodes:
        if node.domain not in (None, "", "ai.onnx"):
            continue
        _canonical_operands(node, opset)
        _fill_defaults(node, opset)
        _negative_axes(node, opset)
    cleanup(graph)
    if not is_sorted(graph):  # an imported model usually is
        toposort(graph)
    return graph


def _canonical_operands(node: gs.Node, opset: int) -> None:
    moved = opforms.ATTRIBUTE_CANONICAL.get(node.op)
    if moved is not None and len(node.inputs) > moved.index:
        operand = node.inputs[moved.index]
        if isinstance(operand, gs.Constant) and moved.attr not in node.attrs:
            node.attrs[moved.attr] = [int(v) for v in constant_values(operand).reshape(-1)]
            del node.inputs[moved.index]
        elif is_empty(operand):
            del node.inputs[moved.index]
    if node.op == "Clip" and opset < opforms.CLIP_SINCE and ("min" in node.attrs or "max" in node.attrs):
        dtype = node.inputs[0].dtype or np.float32
        for bound in ("min", "max"):
            value = node.attrs.pop(bound, None)
            node.inputs.append(gs.Constant(f"{node.name}_{bound}", np.array(value, dtype))
                               if value is not None else gs.Variable.empty())


def _fill_defaults(node: gs.Node, opset: int) -> None:
    for name, value in opforms.attribute_defaults(node.op, opset).items():
        node.attrs.setdefault(name, value)


def _negative_axes(node: gs.Node, opset: int) -> None:
    rank = _rank(node)
    if rank is None:
        return
    if "axes" in node.attrs and isinstance(node.attrs["axes"], (list, tuple)):
        node.attrs["axes"] = [a - rank if a >= 0 else a for a in node.attrs["axes"]]
    since = opforms.AXIS_OPS.get(node.op)
    if since is not None and opset >= since and isinstance(node.attrs.get("axis"), int) and node.attrs["axis"] >= 0:
        node.attrs["axis"] -= rank


def _rank(node: gs.Node) -> int | None:
    tensor = node.outputs[0] if node.op in opforms.AXES_OF_OUTPUT else (node.inputs[0] if node.inputs else None)
    if tensor is None or tensor.shape is None:
        return None
    return len(tensor.shape)
