"""Control flow: ``If``, ``Loop`` and ``Scan`` count the MACs of their subgraphs (profiled as models of their
own through the profile context).

* ``If``: the larger branch (which branch runs is decided at run time: an upper bound);
* ``Loop``: the body times the trip count ``M`` when it is a known constant (an upper bound: the condition
  may end the loop earlier); unknown when ``M`` is not known;
* ``Scan``: the body times the length of the scanned axis (a dim of the first scan input: symbolic when it is).

A subgraph with a node no profiler knows makes its node unknown (``None``), as for any unprofiled op.
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import DimValue, OpCost, dim_max, dim_mul, dim_of, hookimpl
from gsrewrite_builtins.profilers import cost, is_standard


@hookimpl
def gsrewrite_profile_op(node: gs.Node, context: Any) -> OpCost | None:
    if not is_standard(node) or node.op not in ("If", "Loop", "Scan") or \
            not hasattr(context, "subgraph_profile"):
        return None
    if node.op == "If":
        branches = [_macs(context.subgraph_profile(node, name)) for name in ("then_branch", "else_branch")]
        if any(b is None for b in branches):
            return None
        return cost(node, _larger(branches[0], branches[1]))
    if node.op == "Loop":
        return cost(node, _loop(node, context))
    return cost(node, _scan(node, context))


def _macs(profile: Any) -> DimValue | None:
    if profile is None or profile.unprofiled:
        return None
    value = profile.macs
    return value if isinstance(value, int) else dim_of(value)


def _larger(a: DimValue, b: DimValue) -> DimValue:
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else dim_max(a, b)


def _scalar(name: str, elem_type: int) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, elem_type, [])


def _loop(node: gs.Node, context: Any) -> DimValue | None:
    trips = context.value(node.inputs[0].name) if node.inputs and node.inputs[0].name else None
    trips = _as_count(trips)
    if trips is None:
        return None
    carried = [context.value_info(t.name) if t.name else None for t in node.inputs[2:]]
    formal = [_scalar("iteration", onnx.TensorProto.INT64), _scalar("condition", onnx.TensorProto.BOOL), *carried]
    body = _macs(context.subgraph_profile(node, "body", formal))
    return None if body is None else _times(body, trips)


def _scan(node: gs.Node, context: Any) -> DimValue | None:
    scan_inputs = int(node.attrs.get("num_scan_inputs") or 0)
    if scan_inputs <= 0 or scan_inputs > len(node.inputs):
        return None
    states = node.inputs[:len(node.inputs) - scan_inputs]
    scanned = node.inputs[len(node.inputs) - scan_inputs:]
    axes = list(node.attrs.get("scan_input_axes") or [0] * scan_inputs)
    if len(axes) != scan_inputs:
        return None
    first = scanned[0]
    shape = list(first.shape) if first.shape is not None else None
    if shape is None or not shape:
        return None
    length = dim_of(shape[axes[0] % len(shape)])
    if length is None:
        return None
    formal = [context.value_info(t.name) if t.name else None for t in states]
    formal += [context.value_info(t.name, drop_axis=axis) if t.name else None
               for t, axis in zip(scanned, axes, strict=True)]
    body = _macs(context.subgraph_profile(node, "body", formal))
    return None if body is None else _times(body, length)


def _as_count(value: Any) -> int | None:
    try:
        items = list(value.reshape(-1)) if hasattr(value, "reshape") else \
            (list(value) if isinstance(value, (list, tuple)) else [value])
    except (TypeError, ValueError):
        return None
    if len(items) != 1:
        return None
    try:
        count = int(items[0])
    except (TypeError, ValueError, OverflowError):
        return None
    return count if count >= 0 else None


def _times(body: DimValue, count: DimValue) -> DimValue:
    return body * count if isinstance(body, int) and isinstance(count, int) else dim_mul(body, count)
