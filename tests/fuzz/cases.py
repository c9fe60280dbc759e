"""A fuzz case (a model plus how to feed it) and the inputs it is fed at a chosen size.

Dynamic dims are named ``batch`` and ``seq`` in every builder; a case is run at (batch, seq) pairs that
validation does not use. An int64 input named ``mask`` is an attention mask (1 keep, 0 padding) padded on
the left, the right or not at all; integer inputs named ``ids``/``seg`` are token and segment ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto

PADDINGS = ("none", "left", "right")


@dataclass
class Case:
    """One generated model. ``label`` describes how it was drawn (shown when it fails)."""

    model: onnx.ModelProto
    label: str
    #: value ranges of integer inputs other than ``mask``: name -> exclusive upper bound
    vocab: dict[str, int] = field(default_factory=dict)
    #: output name -> its query-row axis: rows whose mask is 0 are not compared (a row-dependent mask such as
    #: a causal or sliding window over padding can leave them with no key at all: no defined attention)
    query_axis: dict[str, int] = field(default_factory=dict)
    #: scale of the float inputs (attention scores grow with it)
    spread: float = 1.0
    #: the device ``apply`` is told the model will run on
    device: str = "cpu"


def _dims(value: onnx.ValueInfoProto, batch: int, seq: int) -> tuple[int, ...]:
    sizes = {"batch": batch, "seq": seq}
    dims = []
    for dim in value.type.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        else:
            dims.append(sizes[dim.dim_param])
    return tuple(dims)


def padding_mask(batch: int, seq: int, padding: str, rng: np.random.Generator) -> np.ndarray:
    """[batch, seq] of 1/0; every row keeps at least one token, and row 0 keeps all of them."""
    mask = np.ones((batch, seq), np.int64)
    if padding == "none":
        return mask
    for row in range(1, batch) if batch > 1 else range(batch):
        kept = int(rng.integers(1, seq + 1))
        if padding == "right":
            mask[row, kept:] = 0
        else:
            mask[row, : seq - kept] = 0
    return mask


def feeds(case: Case, batch: int, seq: int, padding: str, seed: int) -> dict[str, np.ndarray]:
    """Inputs for every graph input of ``case.model`` at (batch, seq)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for value in case.model.graph.input:
        shape = _dims(value, batch, seq)
        elem = value.type.tensor_type.elem_type
        if value.name == "mask":
            out[value.name] = padding_mask(shape[0], shape[1], padding, rng).astype(
                onnx.helper.tensor_dtype_to_np_dtype(elem))
        elif elem == TensorProto.FLOAT:
            out[value.name] = (rng.standard_normal(shape) * case.spread).astype(np.float32)
        else:
            high = case.vocab.get(value.name, 2)
            out[value.name] = rng.integers(0, high, shape).astype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    return out


def used(inits: dict[str, np.ndarray], text: str) -> dict[str, np.ndarray]:
    """The initializers whose names occur (as words) in a graph text."""
    return {k: v for k, v in inits.items() if re.search(rf"\b{re.escape(k)}\b", text)}
