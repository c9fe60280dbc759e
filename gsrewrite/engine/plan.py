"""Search plans: the order in which the matcher visits a template's nodes.

The first step is the *anchor*, the node producing the template's first output; every following step is
reached from an already placed node through a tensor: backwards through a producer (at most one candidate)
before forwards through consumers (several candidates), and forwards from computed tensors before forwards
from wildcards (a wildcard such as a layer's input may have many consumers).
"""

from __future__ import annotations

from dataclasses import dataclass

from gsrewrite.errors import PatternError
from gsrewrite.patterns.template import TemplateGraph


@dataclass(frozen=True)
class PlanStep:
    """Place template node ``node``: as the anchor, or via tensor ``tensor`` at ``slot``.

    ``via == "producer"``: the node produces ``tensor`` as output number ``slot``;
    ``via == "consumer"``: the node reads ``tensor`` (``slot`` is the template's input position).
    """

    node: int
    via: str
    tensor: str = ""
    slot: int = 0


def build_plan(t: TemplateGraph, where: str = "") -> list[PlanStep]:
    """The search plan of ``t``; raises PatternError when the template is not connected."""
    start = t.producer[t.outputs[0]]
    plan = [PlanStep(start, "anchor")]
    placed = {start}
    while len(placed) < len(t.nodes):
        step = _next_step(t, plan, placed)
        if step is None:
            missing = [t.nodes[i].label for i in range(len(t.nodes)) if i not in placed]
            raise PatternError(f"{where}: template is not connected; cannot reach {', '.join(missing)}")
        plan.append(step)
        placed.add(step.node)
    return plan


def _next_step(t: TemplateGraph, plan: list[PlanStep], placed: set[int]) -> PlanStep | None:
    for step in plan:  # backwards first: a tensor has one producer
        for name in t.nodes[step.node].inputs:
            owner = t.producer.get(name)
            if owner is not None and owner not in placed:
                return PlanStep(owner, "producer", name, t.nodes[owner].outputs.index(name))
    wildcard_steps = []
    for step in plan:
        node = t.nodes[step.node]
        for name in [*node.outputs, *node.inputs]:
            for consumer, slot in t.consumers.get(name, []):
                if consumer in placed:
                    continue
                candidate = PlanStep(consumer, "consumer", name, slot)
                if name in t.producer:
                    return candidate
                wildcard_steps.append(candidate)
    return wildcard_steps[0] if wildcard_steps else None
