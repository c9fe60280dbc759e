"""The one matcher: backtracking subgraph isomorphism of a template against an onnx-graphsurgeon graph.

For an anchor node, the matcher follows the variant's search plan (plan.py), trying candidate graph nodes
for each template node, binding template tensors to graph tensors consistently (a wildcard used twice binds
one tensor), trying operand orders of commutative ops itself, and undoing bindings on failure. A full
structural match must then pass the boundary rules — intermediate tensors are used only inside the match and
are not graph outputs; wildcards are not produced inside the match; unused extra outputs stay unused — and
the pattern's named checks. Nodes already claimed by another match are unavailable, so matches never overlap.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.engine import opforms
from gsrewrite.engine.match import CheckFailed, Match
from gsrewrite.engine.plan import PlanStep, build_plan
from gsrewrite.engine.tracing import Tracer
from gsrewrite.graph.core import constant_values, is_empty
from gsrewrite.patterns.pattern import Pattern, Variant
from gsrewrite.patterns.template import Capture, TemplateGraph, TNode

#: Ops whose operands may be given in any order: (domain, op) -> how many leading operands commute (0 = all).
COMMUTATIVE: dict[tuple[str, str], int] = {
    **{("", op): 0 for op in ("Add", "Mul", "Max", "Min", "Sum", "Mean", "Equal", "And", "Or", "Xor",
                              "BitwiseAnd", "BitwiseOr", "BitwiseXor")},
    ("com.microsoft", "SkipLayerNormalization"): 2,  # LN(input + skip): the two are interchangeable
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): 2,
}
#: Variadic commutative ops with more operands than this are matched in the given order only.
MAX_PERMUTED_OPERANDS = 4
#: Outside readers of an intermediate that only need its shape: the nodes computing it are kept.
SHAPE_ONLY = frozenset({"Shape", "Size"})
#: How many outside nodes a side computation (see Matcher._dies_with) may have.
MAX_SIDE_NODES = 64
#: Constants larger than this are never compared against template values.
MAX_COMPARED_ELEMENTS = 1 << 20

CheckFn = Callable[[Match], "str | None"]


@dataclass
class CompiledVariant:
    """A pattern variant with its search plan and the replacement chosen for the target."""

    pattern: Pattern
    variant: Variant
    replacement: TemplateGraph

    @functools.cached_property
    def plan(self) -> list[PlanStep]:
        """The search plan, built on first use: most variants never get past :meth:`possible_in`."""
        if self.variant.plan is None:  # kept on the variant: no module-level state outlives the patterns
            self.variant.plan = build_plan(self.variant.template, f"pattern {self.pattern.name!r}")
        return self.variant.plan  # type: ignore[no-any-return]

    @property
    def anchor_op(self) -> tuple[str, str]:
        node = self.variant.template.nodes[self.plan[0].node]
        return node.domain, node.op

    @functools.cached_property
    def required_ops(self) -> Counter:
        """How many nodes of each (domain, op) a match needs: a graph with fewer cannot match."""
        return Counter((n.domain, n.op) for n in self.variant.template.nodes)

    def possible_in(self, op_counts: Mapping[tuple[str, str], int]) -> bool:
        return all(op_counts.get(op, 0) >= count for op, count in self.required_ops.items())

    @functools.cached_property
    def anchor_feeders(self) -> Counter:
        """(domain, op) of the template nodes feeding the anchor, one per input position."""
        t = self.variant.template
        anchor = t.nodes[self.plan[0].node]
        return Counter((t.nodes[t.producer[x]].domain, t.nodes[t.producer[x]].op)
                       for x in anchor.inputs if x in t.producer)

    def anchor_may_match(self, node: gs.Node) -> bool:
        """A cheap necessary condition: the graph node's inputs come from at least the template's feeders."""
        needed = self.anchor_feeders
        if not needed:
            return True
        have = Counter((t.inputs[0].domain or "", t.inputs[0].op) for t in node.inputs if t.inputs)
        return all(have.get(op, 0) >= count for op, count in needed.items())


class _State:
    __slots__ = ("caps", "nmap", "tmap", "used")

    def __init__(self, tmap: dict, nmap: dict, used: set, caps: dict) -> None:
        self.tmap, self.nmap, self.used, self.caps = tmap, nmap, used, caps

    def copy(self) -> _State:
        return _State(dict(self.tmap), dict(self.nmap), set(self.used), dict(self.caps))


class Matcher:
    """Finds matches of compiled variants in one graph, skipping nodes in ``claimed``."""

    def __init__(self, graph: gs.Graph, claimed: set[int], checks: dict[str, CheckFn],
                 tracer: Tracer | None = None) -> None:
        self.graph = graph
        self.claimed = claimed
        self.checks = checks
        self.tracer = tracer
        self._graph_outputs = {id(t) for t in graph.outputs}
        self._values: dict[int, np.ndarray | None] = {}

    # --- entry point ---------------------------------------------------------------------------------
    def match_at(self, cv: CompiledVariant, anchor: gs.Node) -> Match | None:
        """The first complete match of ``cv`` anchored at ``anchor``, or None."""
        self._cv, self._anchor = cv, anchor
        start = _State({}, {}, set(), {})
        tn = cv.variant.template.nodes[cv.plan[0].node]
        for state in self._node_states(cv.plan[0].node, tn, anchor, start):
            found = self._search(1, state)
            if found is not None:
                return found
        return None

    def _search(self, index: int, state: _State) -> Match | None:
        plan = self._cv.plan
        if index == len(plan):
            return self._finish(state)
        step = plan[index]
        tn = self._cv.variant.template.nodes[step.node]
        for gn in self._candidates(step, tn, state):
            for next_state in self._node_states(step.node, tn, gn, state):
                found = self._search(index + 1, next_state)
                if found is not None:
                    return found
        return None

    def _candidates(self, step: PlanStep, tn: TNode, state: _State) -> list[gs.Node]:
        tensor = state.tmap[step.tensor]
        if step.via == "producer":
            if not tensor.inputs:
                self._fail(state, tn, None, f"{step.tensor!r} has no producer in the graph (input or constant)")
                return []
            node = tensor.inputs[0]
            if node.op != tn.op:
                self._fail(state, tn, node, f"expected {tn.op}, found {node.op}")
                return []
            return [node]
        # one candidate per consumer node (a node reading the tensor twice is listed twice; gs nodes do not hash)
        unique = list({id(n): n for n in tensor.outputs}.values())
        found = [n for n in unique if n.op == tn.op and id(n) not in state.used]
        if not found:
            self._fail(state, tn, None, f"no {tn.op} reads {tensor.name!r}")
        return found

    # --- one node --------------------------------------------------------------------------------------
    def _node_states(self, index: int, tn: TNode, gn: gs.Node, state: _State) -> Iterator[_State]:
        reason = self._node_mismatch(tn, gn, state)
        if reason:
            self._fail(state, tn, gn, reason)
            return
        caps = self._attributes(tn, gn, state)
        if caps is None:
            return
        g_inputs = _strip_empty(list(gn.inputs))
        t_inputs = list(tn.inputs)
        while t_inputs and (not t_inputs[-1] or (
                len(t_inputs) > len(g_inputs) and t_inputs[-1] in self._cv.pattern.optional)):
            t_inputs.pop()  # omitted trailing inputs, and optional ones the graph node does not have
        if len(g_inputs) != len(t_inputs):
            self._fail(state, tn, gn, f"has {len(g_inputs)} inputs, template has {len(t_inputs)}")
            return
        for order in self._orders(tn, g_inputs):
            new = state.copy()
            new.nmap[index], new.caps = gn, dict(caps)
            new.used.add(id(gn))
            if self._bind_outputs(tn, gn, new) and all(
                self._bind_input(name, g_inputs[i], new, tn, gn) for name, i in zip(t_inputs, order, strict=True)
            ):
                yield new

    def _node_mismatch(self, tn: TNode, gn: gs.Node, state: _State) -> str:
        if id(gn) in self.claimed:
            return "already part of another match"
        if id(gn) in state.used:
            return "already used by this match"
        if gn.op != tn.op or _domain(gn.domain) != tn.domain:
            return f"expected {tn.op}, found {gn.op}"
        if len(gn.outputs) < len(tn.outputs):
            return f"has {len(gn.outputs)} outputs, template needs {len(tn.outputs)}"
        for extra in gn.outputs[len(tn.outputs):]:
            if extra.outputs or id(extra) in self._graph_outputs:
                return f"output {extra.name!r} is used but the template drops it"
        return ""

    def _orders(self, tn: TNode, g_inputs: list[gs.Tensor]) -> Iterator[tuple[int, ...]]:
        n = len(g_inputs)
        leading = COMMUTATIVE.get((tn.domain, tn.op))
        k = n if leading == 0 else (leading or 0)
        if k < 2 or n < 2 or k > MAX_PERMUTED_OPERANDS:
            yield tuple(range(n))
            return
        seen = set()
        for head in itertools.permutations(range(min(k, n))):
            order = (*head, *range(min(k, n), n))
            key = tuple(id(g_inputs[i]) for i in order)
            if key not in seen:
                seen.add(key)
                yield order

    def _attributes(self, tn: TNode, gn: gs.Node, state: _State) -> dict[str, Any] | None:
        caps = state.caps
        for name, spec in tn.attrs.items():
            if name in gn.attrs:
                value = _plain(gn.attrs[name])
            else:  # a standard op's attribute left at its default (apply canonicalizes first; simplify's passes not)
                value = self._default(gn, name)
                if value is None:
                    self._fail(state, tn, gn, f"has no attribute {name!r}")
                    return None
            if isinstance(spec, Capture):
                if spec.name in caps and not _same(caps[spec.name], value):
                    self._fail(state, tn, gn, f"{name}={value!r} differs from @{spec.name}={caps[spec.name]!r}")
                    return None
                caps = {**caps, spec.name: value}
            elif not _same(spec, value):
                if self.tracer is not None:  # formatting values (arrays) is not free: only when explaining
                    self._fail(state, tn, gn, f"attribute {name}={value!r}, template requires {spec!r}")
                return None
        return caps

    def _default(self, gn: gs.Node, name: str) -> Any:
        """The schema default of attribute ``name`` of a standard-domain node at the graph's opset, else None."""
        if gn.domain not in (None, "", "ai.onnx") or self.graph.opset is None:
            return None
        value = opforms.attribute_defaults(gn.op, int(self.graph.opset)).get(name)
        return None if value is None else _plain(value)

    def _bind_outputs(self, tn: TNode, gn: gs.Node, state: _State) -> bool:
        for name, tensor in zip(tn.outputs, gn.outputs, strict=False):  # extra outputs checked unused
            if not name:
                continue
            bound = state.tmap.get(name)
            if bound is None:
                state.tmap[name] = tensor
            elif bound is not tensor:
                self._fail(state, tn, gn, f"output {tensor.name!r} is not the tensor bound to {name!r}")
                return False
        return True

    def _bind_input(self, name: str, tensor: gs.Tensor, state: _State, tn: TNode, gn: gs.Node) -> bool:
        t = self._cv.variant.template
        if not name:
            return is_empty(tensor) or self._fail(state, tn, gn, "has an input the template leaves out")
        if is_empty(tensor):
            return self._fail(state, tn, gn, f"input for {name!r} is omitted")
        bound = state.tmap.get(name)
        if bound is not None:
            return bound is tensor or self._fail(
                state, tn, gn, f"reads {tensor.name!r} where {name!r} is already bound to {bound.name!r}")
        if name in t.constants:
            if not self._constant_equals(tensor, t.constants[name]):
                return self.tracer is not None and self._fail(
                    state, tn, gn, f"{tensor.name!r} is not the constant {_show(t.constants[name])}")
        elif name in t.producer:
            if not tensor.inputs:
                return self._fail(state, tn, gn, f"{tensor.name!r} must be computed by the pattern's nodes")
        elif name in self._cv.pattern.constants and not isinstance(tensor, gs.Constant):
            return self._fail(state, tn, gn, f"{name!r} must be a constant, {tensor.name!r} is computed")
        state.tmap[name] = tensor
        return True

    def _constant_equals(self, tensor: gs.Tensor, expected: np.ndarray) -> bool:
        if not isinstance(tensor, gs.Constant):
            return False
        key = id(tensor)
        if key not in self._values:
            self._values[key] = _numeric(tensor)
        actual = self._values[key]
        if actual is None:
            return False
        want = expected.astype(np.float64)
        if want.size == 1:
            if actual.size == 0:
                return False
            ref = float(want.reshape(-1)[0])
            tol = self._cv.pattern.tolerance * max(1.0, abs(ref))
            return bool(np.all(np.abs(actual - ref) <= tol))
        if actual.size != want.size or np.squeeze(actual).shape != np.squeeze(want).shape:
            return False
        return bool(np.allclose(actual.reshape(want.shape), want, rtol=self._cv.pattern.tolerance, atol=0))

    # --- completion ------------------------------------------------------------------------------------
    def _finish(self, state: _State) -> Match | None:
        kept: set[str] = set()
        reason: str | None = self._boundary_violation(state, kept)
        if reason:
            self._fail(state, None, None, reason)
            return None
        t = self._cv.variant.template
        match = Match(self._cv.pattern, self._cv.variant, self.graph, dict(state.tmap),
                      {t.nodes[i].label: n for i, n in state.nmap.items()}, dict(state.caps), self._cv.replacement,
                      kept=frozenset(kept))
        for check in self._cv.pattern.checks:
            try:
                reason = match.calling(check, self.checks[check])
            except CheckFailed as exc:
                reason = str(exc)
            if reason:
                self._fail(state, None, None, f"check {check}: {reason}")
                return None
        return match

    def _boundary_violation(self, state: _State, kept: set[str]) -> str:
        """Why the match may not be replaced ('' if it may); ``kept`` collects intermediates read outside only
        for their shape (their producers stay in the graph)."""
        t = self._cv.variant.template
        produced = {id(o) for n in state.nmap.values() for o in n.outputs}
        for name in t.inputs:
            tensor = state.tmap.get(name)
            if tensor is not None and id(tensor) in produced:
                return f"wildcard {name!r} is bound to {tensor.name!r}, which the match itself computes"
        needed = {id(state.tmap[name]) for name in t.inputs if name in state.tmap}  # the replacement reads them
        for name in t.intermediates:
            tensor = state.tmap[name]
            if id(tensor) in self._graph_outputs:
                return f"intermediate {tensor.name!r} ({name}) is a graph output"
            for consumer in tensor.outputs:
                if id(consumer) in state.used or self._dies_with(consumer, state.used, needed):
                    continue
                if self._shape_only(consumer):
                    kept.add(name)
                    continue
                return f"intermediate {tensor.name!r} ({name}) is also used by {consumer.name or consumer.op!r}"
        return ""

    def _shape_only(self, node: gs.Node, depth: int = 0) -> bool:
        """True when ``node`` (outside the match) reads its input only to learn a shape: a Shape/Size node, or
        a chain of nodes whose every use ends in one (Transpose -> Shape)."""
        if node.op in SHAPE_ONLY:
            return True
        if depth >= 4 or not node.outputs:
            return False
        uses = [c for out in node.outputs for c in out.outputs]
        return bool(uses) and all(id(out) not in self._graph_outputs for out in node.outputs) and all(
            self._shape_only(c, depth + 1) for c in uses)

    def _dies_with(self, node: gs.Node, used: set[int], needed: set[int]) -> bool:
        """True when everything ``node`` computes feeds only the match (e.g. a Shape node computing a matched
        Reshape's target shape): such a side computation dies with the match and is removed by cleanup. It
        must not compute any tensor the match binds as an input (``needed``): the replacement reads those."""
        stack, seen = [node], set()
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            if len(seen) > MAX_SIDE_NODES:
                return False
            for out in current.outputs:
                if id(out) in self._graph_outputs or id(out) in needed:
                    return False
                stack.extend(c for c in out.outputs if id(c) not in used)
        return True

    def _fail(self, state: _State, tn: TNode | None, gn: gs.Node | None, reason: str) -> bool:
        if self.tracer is not None:
            self.tracer.record(self._cv, len(state.nmap), self._anchor, tn, gn, reason)
        return False


def _domain(domain: str | None) -> str:
    return "" if domain in (None, "", "ai.onnx") else domain


def _strip_empty(tensors: list[gs.Tensor]) -> list[gs.Tensor]:
    while tensors and is_empty(tensors[-1]):
        tensors.pop()
    return tensors


def _plain(value: Any) -> Any:
    if isinstance(value, gs.Constant):
        return constant_values(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        except (TypeError, ValueError):
            return False
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        try:
            return bool(np.isclose(float(a), float(b), rtol=1e-6, atol=0))
        except (TypeError, ValueError):
            return False
    return a == b


def _numeric(tensor: gs.Constant) -> np.ndarray | None:
    try:
        shape = tensor.shape or ()
        if int(np.prod(shape)) > MAX_COMPARED_ELEMENTS:
            return None
        values = constant_values(tensor)
    except Exception:  # unreadable constant: treat as "does not match"
        return None
    if values.dtype.kind not in "fiub":
        return None
    return values.astype(np.float64)


def _show(value: np.ndarray) -> str:
    flat = value.reshape(-1)
    return f"{flat[0]:g}" if flat.size == 1 else f"array{tuple(value.shape)}"
