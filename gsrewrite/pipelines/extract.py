"""``extract``: a self-contained sub-model between given tensors, validated against the same tensors of the full
model.

The cut (:func:`gsrewrite.graph.subgraph.cut`) keeps only the nodes and initializers it needs and types its
inputs and outputs from shape inference. Validation runs the full model once, on generated inputs (or given
ones), with the cut's input and output tensors added as outputs; the sub-model then runs on the captured input
tensors, and its outputs must equal what the full model computed (same kernels: equal within 1e-5).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from gsrewrite.graph.subgraph import cut
from gsrewrite.stages import stage

log = logging.getLogger(__name__)


@dataclass
class ExtractResult:
    """The sub-model, and how its outputs compare with the full model's (empty when not validated)."""

    model: onnx.ModelProto
    inputs: list[str]
    outputs: list[str]
    comparisons: list[Any] = field(default_factory=list)
    validated: bool = False

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)

    def summary(self) -> str:
        nodes, weights = len(self.model.graph.node), len(self.model.graph.initializer)
        text = f"{nodes} node(s), {weights} initializer(s); inputs {', '.join(self.inputs)} -> outputs " \
               f"{', '.join(self.outputs)}"
        if not self.validated:
            return text + "; not validated"
        worst = max((c.max_abs or 0.0 for c in self.comparisons), default=0.0)
        verdict = "agree with" if self.ok else "DIFFER from"
        return f"{text}; outputs {verdict} the full model's (max abs diff {worst:.3g})"

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "outputs": self.outputs, "nodes": len(self.model.graph.node),
                "initializers": len(self.model.graph.initializer), "validated": self.validated, "ok": self.ok,
                "comparisons": [c.to_dict() for c in self.comparisons]}


def extract(model: onnx.ModelProto | str | os.PathLike, inputs: Sequence[str], outputs: Sequence[str], *,
            validate: bool = True, input_shapes: Any = None, given: str | os.PathLike | None = None,
            atol: float = 1e-5, rtol: float = 1e-5) -> ExtractResult:
    """Cut the sub-model computing ``outputs`` from ``inputs`` out of ``model`` and, with ``validate``, check it
    on inputs of the full model (``given``: an .npz file; else generated, ``input_shapes`` as for validation)."""
    original = model if isinstance(model, onnx.ModelProto) else _load(model)
    sub = cut(original, list(inputs), list(outputs))
    result = ExtractResult(sub, list(inputs), list(outputs))
    if validate:
        with stage("validating"):
            result.comparisons = _compare(original, sub, _feeds(original, input_shapes, given), atol, rtol)
        result.validated = True
    return result


def _load(path: str | os.PathLike) -> onnx.ModelProto:
    from gsrewrite.model_io import load_model

    return load_model(path)


def _feeds(model: onnx.ModelProto, input_shapes: Any, given: str | os.PathLike | None) -> dict[str, np.ndarray]:
    """Inputs of the full model: given, or generated at the sample size when its estimated peak memory fits the
    budget validation uses (sizes are checked before anything is allocated)."""
    from gsrewrite.validation.input_sets import build_set, sample_size
    from gsrewrite.validation.npz_files import load_npz
    from gsrewrite.validation.signature import model_inputs

    if given is not None:
        return load_npz(given)
    specs = model_inputs(model)
    return build_set(model, specs, sample_size(model, specs, input_shapes), 0, seed=0).feed(0)


def _compare(original: onnx.ModelProto, sub: onnx.ModelProto, feeds: dict[str, np.ndarray], atol: float,
             rtol: float) -> list[Any]:
    from gsrewrite.validation.metrics import compare_output
    from gsrewrite.validation.runner import open_session, resolve_model

    probe = onnx.ModelProto()
    probe.CopyFrom(original)
    present = {o.name for o in probe.graph.output}
    probe.graph.output.extend(vi for vi in (*sub.graph.input, *sub.graph.output) if vi.name not in present)
    with open_session(resolve_model(probe, "original")) as session:
        captured = session.run({k: v for k, v in feeds.items() if k in {i.name for i in original.graph.input}})
    with open_session(resolve_model(sub, "extracted")) as session:
        produced = session.run({vi.name: captured[vi.name] for vi in sub.graph.input})
    return [compare_output(vi.name, 0, captured[vi.name], produced[vi.name], atol, rtol) for vi in sub.graph.output]
