"""Proving what a tensor computes: the nodes producing it, cut out of the graph and run alone in onnxruntime.

Exporters spell side computations (an attention mask's score bias, the position ids of an embedding) in many
ways. Checks that must know *what* such a tensor holds do not match its spelling: they collect the nodes
computing it (:func:`computation`), which may read constants, the values of a few graph inputs and the *shapes*
of other tensors, build a model of just those nodes (:func:`submodel`) and run it on test inputs
(:func:`evaluator`, one session for many inputs; :func:`run`). Which lengths a proof must run at to hold for
all of them is :mod:`gsrewrite_patterns._shared.sizes`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from gsrewrite.plugin_api import legalize

#: Most nodes a side computation may have (exporters use 5-40).
MAX_NODES = 64
#: Ops that read only the shape of their input: their inputs' values do not matter.
SHAPE_READERS = frozenset({"Shape", "Size"})


class NotProven(Exception):
    """Why a tensor is not what a check needs (the check's reason)."""


@dataclass
class Computation:
    """The nodes computing a tensor (in graph order), the graph inputs whose values they read, and the tensors
    (inputs or intermediates) whose shapes alone they read."""

    nodes: list[gs.Node]
    value_inputs: list[gs.Variable]
    shape_inputs: list[gs.Variable]


def computation(graph: gs.Graph, tensor: gs.Tensor, what: str = "the tensor") -> Computation:
    """Collect the computation of ``tensor`` back to constants, graph inputs and shape reads (else NotProven)."""
    graph_inputs = {id(t) for t in graph.inputs}
    nodes: dict[int, gs.Node] = {}
    value_inputs: dict[int, gs.Variable] = {}
    shape_sources: dict[int, gs.Variable] = {}
    pending = [tensor]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen or isinstance(current, gs.Constant):
            continue
        seen.add(id(current))
        if id(current) in graph_inputs:
            value_inputs[id(current)] = current
            continue
        if not current.inputs:
            raise NotProven(f"'{current.name}' has no producer and is not a graph input")
        node = current.inputs[0]
        if node.domain not in (None, "", "ai.onnx") or any(isinstance(v, gs.Graph) for v in node.attrs.values()):
            raise NotProven(f"{what} is computed by {node.op} (domain or subgraph not supported)")
        nodes[id(node)] = node
        if len(nodes) > MAX_NODES:
            raise NotProven(f"{what} is computed by more than {MAX_NODES} nodes")
        for source in node.inputs:
            if node.op in SHAPE_READERS and isinstance(source, gs.Variable):
                shape_sources[id(source)] = source
            elif source.name:
                pending.append(source)
    # a tensor whose value is computed anyway needs no stand-in for its shape
    shape_only = [t for key, t in shape_sources.items() if key not in seen]
    ordered = [n for n in graph.nodes if id(n) in nodes]  # the graph is topologically sorted
    return Computation(ordered, list(value_inputs.values()), shape_only)


def stand_in(tensor: gs.Variable, sizes: dict[str, int], default: tuple[int, ...]) -> np.ndarray:
    """Zeros shaped like ``tensor`` (for a shape-only input): static dims as declared, named dims from
    ``sizes``, other dims from ``default`` by axis (1 beyond it)."""
    shape = []
    for axis, dim in enumerate(tensor.shape or ()):
        if isinstance(dim, int) and dim > 0:
            shape.append(dim)
        elif isinstance(dim, str) and dim in sizes:
            shape.append(sizes[dim])
        else:
            shape.append(default[axis] if axis < len(default) else 1)
    return np.zeros(shape, dtype=np.dtype(tensor.dtype) if tensor.dtype is not None else np.int64)


def submodel(opset: int, nodes: list[gs.Node], inputs: list[gs.Variable],
             output: gs.Tensor | Sequence[gs.Tensor]) -> onnx.ModelProto:
    """``nodes`` alone as a model computing ``output`` (or several outputs; copied: the graph is not touched)."""
    env: dict[int, gs.Tensor] = {}

    def copy(tensor: gs.Tensor) -> gs.Tensor:
        if id(tensor) not in env:
            if isinstance(tensor, gs.Constant):
                env[id(tensor)] = gs.Constant(tensor.name, tensor.values)
            else:
                env[id(tensor)] = gs.Variable(tensor.name, dtype=tensor.dtype, shape=tensor.shape)
        return env[id(tensor)]

    sub_inputs = [copy(t) for t in inputs]
    for t in sub_inputs:
        t.shape = [None] * len(t.shape or ())
    sub_nodes = [gs.Node(n.op, n.name, dict(n.attrs), [copy(t) if t.name else gs.Variable.empty() for t in n.inputs],
                         [copy(t) if t.name else gs.Variable.empty() for t in n.outputs]) for n in nodes]
    outs = [copy(t) for t in ([output] if isinstance(output, gs.Tensor) else output)]
    for out in outs:
        out.shape = None
    sub = gs.Graph(nodes=sub_nodes, inputs=sub_inputs, outputs=outs, opset=opset)
    legalize(sub)  # the engine's canonical spelling (axes as attributes, ...) back to the opset's
    model = gs.export_onnx(sub, do_type_check=False)
    model.ir_version = min(model.ir_version, 8)
    del model.graph.value_info[:]
    return model


def evaluator(model: onnx.ModelProto | bytes, what: str = "the computation"
              ) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """A function computing the single output of ``model`` for feeds (one onnxruntime session from gsrewrite's
    runner: no graph optimizations, each run under the run time limit); it and its calls raise NotProven on
    failure."""
    evaluate = outputs_evaluator(model, what)
    return lambda feeds: np.asarray(next(iter(evaluate(feeds).values())))


def outputs_evaluator(model: onnx.ModelProto | bytes, what: str = "the computation"
                      ) -> Callable[[dict[str, np.ndarray]], dict[str, Any]]:
    """:func:`evaluator` for every output of ``model`` (by name: arrays, lists of arrays for sequences)."""
    from gsrewrite.plugin_api import GsrewriteError, model_session

    try:
        session = model_session(model, what)
    except GsrewriteError as exc:  # the message names ``what``
        raise NotProven(str(exc).splitlines()[0][:600]) from None

    def evaluate(feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        try:
            return session.run(feeds)
        except GsrewriteError as exc:
            raise NotProven(str(exc).splitlines()[0][:600]) from None

    return evaluate


def run(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], what: str = "the computation") -> np.ndarray:
    """The single output of ``model`` on ``feeds`` (onnxruntime, no graph optimizations); NotProven on failure."""
    return evaluator(model, what)(feeds)
