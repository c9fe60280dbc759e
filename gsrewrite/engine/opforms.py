"""Opset-dependent spellings of the same operation, and schema look-ups.

Between opsets, some operands moved from attributes to inputs (Reduce* / Squeeze / Unsqueeze ``axes``,
Split ``split``, Clip ``min``/``max``). gsrewrite matches one *canonical* spelling (axes and split as
attributes, Clip bounds as inputs) and converts back to what the model's opset requires before saving.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import onnx
from onnx import defs


@dataclass(frozen=True)
class MovedOperand:
    """An operand that is attribute ``attr`` before opset ``since`` and input number ``index`` from it on."""

    attr: str
    index: int
    since: int


_REDUCE_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
              "ReduceLogSumExp", "ReduceSumSquare")

#: op type -> the operand that moved, in the canonical (attribute) direction.
ATTRIBUTE_CANONICAL: dict[str, MovedOperand] = {
    **{op: MovedOperand("axes", 1, 18) for op in _REDUCE_18},
    "ReduceSum": MovedOperand("axes", 1, 13),
    "Squeeze": MovedOperand("axes", 1, 13),
    "Unsqueeze": MovedOperand("axes", 1, 13),
    "Split": MovedOperand("split", 1, 13),
}

#: Clip's bounds: attributes before opset 11, inputs 1 and 2 from opset 11 on (canonical: inputs).
CLIP_SINCE = 11

#: ops whose single ``axis`` attribute may be normalized to a negative value: op -> since which opset the
#: attribute means "this axis" (before that Softmax & co. flattened to 2-D, so the value is left alone).
AXIS_OPS: dict[str, int] = {
    "Softmax": 13, "LogSoftmax": 13, "Hardmax": 13, "Concat": 1, "Split": 1, "Gather": 1, "GatherElements": 1,
    "LayerNormalization": 1, "ArgMax": 1, "ArgMin": 1, "CumSum": 1,
}

#: ops whose ``axes`` refer to the rank of the *output* (Unsqueeze) rather than the input.
AXES_OF_OUTPUT = {"Unsqueeze"}


@functools.lru_cache(maxsize=4096)
def schema(op_type: str, opset: int, domain: str = "") -> defs.OpSchema | None:
    """The schema in force for ``op_type`` at ``opset`` (None when ONNX defines none)."""
    try:
        return defs.get_schema(op_type, opset, domain)
    except defs.SchemaError:
        return None


@functools.lru_cache(maxsize=4096)
def attribute_defaults(op_type: str, opset: int) -> dict[str, object]:
    """Default attribute values of a standard op at ``opset`` (attributes without default omitted)."""
    s = schema(op_type, opset)
    if s is None:
        return {}
    result: dict[str, object] = {}
    for name, attr in s.attributes.items():
        default = attr.default_value
        if default is None or default.type == onnx.AttributeProto.UNDEFINED:
            continue
        value = onnx.helper.get_attribute_value(default)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list):
            value = [v.decode() if isinstance(v, bytes) else v for v in value]
        result[name] = value
    return result


def op_exists(op_type: str, opset: int, domain: str = "") -> bool:
    """True when the standard ONNX domain defines ``op_type`` at ``opset``."""
    return schema(op_type, opset, domain) is not None


@functools.lru_cache(maxsize=4096)
def attribute_types(op_type: str, opset: int, domain: str = "") -> dict[str, int]:
    """Attribute name -> AttributeProto type for a standard op (empty when unknown)."""
    s = schema(op_type, opset, domain)
    if s is None:
        return {}
    # AttrType is an int enum; onnx's stub lacks __int__
    return {name: int(attr.type) for name, attr in s.attributes.items()}  # type: ignore[call-overload]


@functools.lru_cache(maxsize=1)
def _first_versions() -> dict[str, int]:
    first: dict[str, int] = {}
    for s in defs.get_all_schemas_with_history():
        if s.domain in ("", "ai.onnx"):
            first[s.name] = min(first.get(s.name, 10_000), int(s.since_version))
    return first


def first_opset(op_type: str) -> int | None:
    """The first opset that defines the standard op ``op_type`` (None when ONNX has no such op)."""
    return _first_versions().get(op_type)
