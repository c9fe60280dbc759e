"""The one replace primitive: put a pattern's replacement template in place of a match.

The replacement's outputs reuse the matched output tensors (so consumers and graph outputs need no
rewiring), its inputs are the tensors the match bound (an unbound optional input is left out), computed
values become new constants (or, when a computation returns a variable of the graph, that tensor), and
attributes come from literals, ``@captures`` or - for a replacement node whose ``[label]`` equals a match
node's - that node's own attributes. New nodes are named after the pattern.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from gsrewrite.engine.acyclic import Positions, cycle_reason
from gsrewrite.engine.match import Match
from gsrewrite.engine.opforms import attribute_types
from gsrewrite.graph.core import NameSource, constant_values, made_values
from gsrewrite.graph.shapes import annotate_node
from gsrewrite.patterns.template import Capture, TNode

_A = onnx.AttributeProto


class ReplaceRefused(Exception):
    """The replace primitive refused a match (the graph is left as it was); the message says why."""


def replacement_inputs(match: Match) -> dict[str, gs.Tensor]:
    """The graph tensors the replacement reads, by template name (bound inputs and computed variables)."""
    found: dict[str, gs.Tensor] = {}
    for name in match.replacement.inputs:
        value = match.computed.get(name) if name in match.computed else match.tensors.get(name)
        if isinstance(value, gs.Tensor):
            found[name] = value
    return found


def replacement_outputs(match: Match) -> dict[str, gs.Tensor]:
    """The matched tensors the replacement writes, by template name."""
    outputs = match.variant.outputs
    return {name: match.tensors[outputs.get(name, name)] for name in match.replacement.outputs
            if outputs.get(name, name) in match.tensors}


def refusal(match: Match, positions: Positions) -> str:
    """Why the replace primitive refuses ``match`` ('' when it does not): its replacement would make a cycle (an
    input computed, through nodes outside the match, from one of its outputs)."""
    removed = {id(n) for n in match.removed_nodes()}
    return cycle_reason(replacement_inputs(match), replacement_outputs(match), removed, positions)


def replace_match(graph: gs.Graph, match: Match, names: NameSource, positions: Positions | None = None
                  ) -> list[gs.Node]:
    """Replace ``match`` in ``graph``; returns the new nodes. The matched nodes are left detached. Raises
    :class:`ReplaceRefused` (nothing changed) when the replacement would make a cycle."""
    positions = positions if positions is not None else Positions(graph)
    reason = refusal(match, positions)
    if reason:
        raise ReplaceRefused(reason)
    replacement = match.replacement
    stamp = f"{match.pattern.name}:{match.anchor.name or match.anchor.op}"
    env: dict[str, gs.Tensor | None] = {}
    for name in replacement.inputs:
        if name in match.computed:
            value = match.computed[name]  # a tensor of the graph (a computation located it), or a new constant
            env[name] = value if isinstance(value, gs.Variable) else _constant(names(f"{stamp}/{name}"), value)
        else:
            env[name] = match.tensors.get(name)
    for name, value in replacement.constants.items():
        env[name] = gs.Constant(names(f"{stamp}/{name}"), np.asarray(value))
    for name in replacement.outputs:
        env[name] = match.tensors[match.variant.outputs.get(name, name)]
    inherited = {label: dict(node.attrs) for label, node in match.nodes.items()}
    detach(match.removed_nodes())
    single = len(replacement.nodes) == 1
    added = []
    for tn in replacement.nodes:
        inputs = [_input(env.get(x)) if x else gs.Variable.empty() for x in tn.inputs]
        while inputs and isinstance(inputs[-1], gs.Variable) and not inputs[-1].name:
            inputs.pop()
        outputs = [_output(env, o, names, stamp) for o in tn.outputs]
        attrs = {**inherited.get(tn.label, {}), **resolve_attributes(tn, match)}
        node = gs.Node(op=tn.op, name=names(stamp if single else f"{stamp}/{tn.label}"), attrs=attrs,
                       inputs=inputs, outputs=outputs, domain=tn.domain or None)
        if node.domain not in (None, "", "ai.onnx"):  # contrib ops: type new outputs (shape handlers) for the
            annotate_node(node)                       # checks of later sweeps; ONNX infers the standard ones
        graph.nodes.append(node)
        added.append(node)
    positions.placed(added, set())
    return added


def detach(nodes: Any) -> None:
    """Disconnect nodes from all their tensors (they are dropped by the next cleanup)."""
    for node in nodes:
        node.inputs.clear()
        node.outputs.clear()


def _input(tensor: gs.Tensor | None) -> gs.Tensor:
    return tensor if tensor is not None else gs.Variable.empty()


def _output(env: dict[str, gs.Tensor | None], name: str, names: NameSource, stamp: str) -> gs.Tensor:
    if not name:
        return gs.Variable.empty()
    tensor = env.get(name)
    if tensor is None:
        tensor = gs.Variable(names(f"{stamp}/{name}"))
        env[name] = tensor
    return tensor


def _constant(name: str, value: Any) -> gs.Constant:
    if isinstance(value, LazyValues):  # computed into the request's scratch file
        return gs.Constant(name, value)
    array = constant_values(value) if isinstance(value, gs.Constant) else np.asarray(value)
    return gs.Constant(name, made_values(name, array))


def resolve_attributes(tn: TNode, match: Match) -> dict[str, Any]:
    """Attribute values of a replacement node: literals as written, ``@name`` looked up in the match."""
    types = attribute_types(tn.op, match.opset, tn.domain) if not tn.domain else {}
    result: dict[str, Any] = {}
    for name, spec in tn.attrs.items():
        if isinstance(spec, Capture):
            result[name] = coerce(match.value(spec.name), spec.type or types.get(name, 0))
        else:
            result[name] = coerce(spec, types.get(name, 0))
    return result


def coerce(value: Any, attr_type: int) -> Any:
    """Convert a captured/computed value to what an attribute of ``attr_type`` holds (0 = infer)."""
    if isinstance(value, gs.Constant):
        value = np.asarray(value.values)
    if attr_type == _A.TENSOR:
        return gs.Constant("", np.asarray(value))
    if isinstance(value, str):
        return value if attr_type == _A.STRING else _infer(value)
    flat = np.asarray(value).reshape(-1)
    if attr_type == _A.FLOAT:
        return float(flat[0])
    if attr_type == _A.INT:
        return int(flat[0])
    if attr_type == _A.FLOATS:
        return [float(v) for v in flat]
    if attr_type == _A.INTS:
        return [int(v) for v in flat]
    if attr_type == _A.STRING:
        return str(value)
    return _infer(value)


def _infer(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return list(value)
    if isinstance(value, np.ndarray):
        if value.size == 1 and value.ndim <= 1:
            return value.reshape(-1)[0].item()
        return gs.Constant("", value) if value.ndim > 1 else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
