"""``downcast`` (opt-in): float64 constants stored as float32, int64 constants as int32, where allowed.

A constant is narrowed only when every node that reads it accepts the narrower type at that input: its
operator schema gives the input a type variable of its own (Gather's ``Tind``, OneHot's indices) that
allows the new type, or it is a Cast. Inputs typed ``tensor(int64)`` (Reshape/Expand/ConstantOfShape
shapes, Pad pads, TopK's k) and type variables shared with other operands (Add's ``T``, Slice's ``Tind``)
keep their type: narrowing those is what makes scs4onnx's downcast produce models onnxruntime rejects.
int64 values must fit in int32; float64 -> float32 rounds (that is what opting in means).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from gsrewrite.simplifier.passes.base import SimplifyPass

NARROWER = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32)}
_ONNX_NAMES = {np.dtype(np.float32): "tensor(float)", np.dtype(np.int32): "tensor(int32)"}


class Downcast(SimplifyPass):
    name = "downcast"
    description = ("Opt-in: store float64 constants as float32 and int64 constants as int32 where every "
                   "consumer accepts the narrower type (never a Reshape shape).")
    default = False

    def apply(self, graph: gs.Graph) -> int:
        opset, count = int(graph.opset), 0
        seen: set[int] = set()
        for node in graph.nodes:
            for tensor in node.inputs:
                if not isinstance(tensor, gs.Constant) or id(tensor) in seen or tensor.dtype not in NARROWER:
                    continue
                seen.add(id(tensor))
                if _narrow(tensor, opset):
                    count += 1
        return count


def _narrow(tensor: gs.Constant, opset: int) -> bool:
    target: np.dtype = NARROWER[np.dtype(tensor.dtype)]
    if not tensor.outputs or not all(accepts(n, i, target, opset) for n in tensor.outputs
                                     for i, t in enumerate(n.inputs) if t is tensor):
        return False
    values = np.asarray(tensor.values)
    if target.kind == "i" and values.size and (values.min() < np.iinfo(target).min or
                                               values.max() > np.iinfo(target).max):
        return False
    tensor.values = values.astype(target)
    return True


def accepts(node: gs.Node, index: int, dtype: np.dtype, opset: int) -> bool:
    """True when input ``index`` of ``node`` may have type ``dtype`` whatever the other operands' types."""
    if node.op == "Cast" and node.domain in (None, "", "ai.onnx"):
        return True
    try:
        schema = onnx.defs.get_schema(node.op, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return False
    if index >= len(schema.inputs) or schema.inputs[index].option == schema.inputs[index].option.Variadic:
        return False
    type_str = schema.inputs[index].type_str
    constraint = next((c for c in schema.type_constraints if c.type_param_str == type_str), None)
    if constraint is None or _ONNX_NAMES[dtype] not in constraint.allowed_type_strs:
        return False
    others = [f.type_str for j, f in enumerate(schema.inputs) if j != index] + [f.type_str for f in schema.outputs]
    return type_str not in others
