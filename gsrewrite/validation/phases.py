"""A decoder's phases as generation runs them, for timing: a decode step (one new token over a past) and a prefill
(new tokens over no past), sized by the graph's own dim relations. ``gsrewrite bench --past``, compress's latency
judgement and the int4 quantizer's activation probe take their feeds from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from gsrewrite.errors import UsageError


@dataclass
class Phase:
    """A decoder's step to time: ``decode`` (one new token over a past) or ``prefill`` (new tokens, no past);
    ``tokens``: the tokens it produces (batch x new tokens)."""

    name: str
    feed: dict[str, np.ndarray]
    tokens: int
    past: int


def decoder_phases(model: onnx.ModelProto, input_shapes: Any = None, *, past: int = 128, new_tokens: int = 128,
                   seed: int = 0) -> list[Phase] | None:
    """For a model with a KV cache: the feeds of a decode step (1 new token over ``past`` cached ones) and of a
    prefill (``new_tokens`` tokens, no past), sized by the graph's own dim relations (a mask over past + new
    tokens, positions after the past) and checked against the memory budget before anything is allocated.
    ``None`` for other models."""
    from gsrewrite.validation.dims import input_dims
    from gsrewrite.validation.input_sets import fit_budget
    from gsrewrite.validation.inputs import generate_inputs, plan_inputs
    from gsrewrite.validation.memory import default_budget
    from gsrewrite.validation.signature import model_inputs
    from gsrewrite.validation.sizes import SizeSet

    if past < 0 or new_tokens < 1:
        raise UsageError("--past must be at least 0 and --new-tokens at least 1")
    specs = model_inputs(model)
    dims = input_dims(model, input_shapes, specs).variants()[0]
    if not dims.is_decoder:
        return None
    base = dims.sample_bindings()
    cache = [n for n, role in dims.roles.items() if role == "past" and n in base and n not in dims.fixed]
    new = [n for n in dims.new_tokens if n in base and n not in dims.fixed]
    batch = next((size for n, size in base.items() if dims.roles.get(n) == "batch"), 1)
    phases = []
    for name, cached, added in (("decode", past, 1), ("prefill", 0, new_tokens)):
        bindings = {**base, **{n: cached for n in cache}, **{n: added for n in new}}
        shapes = dims.shapes(bindings)
        fit_budget(model, specs, [SizeSet(name, shapes)], default_budget())
        plans = plan_inputs(model, specs, shapes, positions_start=dims.positions_start(bindings))
        feed = generate_inputs(plans, seed)
        phases.append(Phase(name, feed, batch * max((bindings[n] for n in new), default=1), cached))
    return phases


