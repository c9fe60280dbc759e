"""Check symbolic shapes against onnxruntime: run the model at up to three input sizes (validation's sample,
small and long sets) with every intermediate tensor as an output, and compare each tensor's actual shape with
its expression evaluated at that size.

The symbols are bound from the inputs (a bare symbol dim of an input takes the size fed there); a tensor whose
expression is unknown or names a symbol no input binds (``NonZero``'s count) is counted as not checkable, not
as wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.graph import symdim
from gsrewrite.graph.symbolic_shapes import SymbolicShapes, infer_symbolic
from gsrewrite.validation.input_sets import fit_budget
from gsrewrite.validation.inputs import generate_inputs, plan_inputs
from gsrewrite.validation.memory import default_budget
from gsrewrite.validation.runner import cannot_validate, check_outputs, open_session, serialized_source, why_unrunnable
from gsrewrite.validation.shapes import resolve_shapes
from gsrewrite.validation.signature import model_inputs
from gsrewrite.validation.sizes import SizeSet, size_sets

log = logging.getLogger(__name__)


@dataclass
class SizeCheck:
    """One input size: how many tensors matched, which did not, how many could not be checked."""

    size: str
    bindings: dict[str, int]
    matched: int = 0
    unchecked: int = 0
    mismatches: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)


@dataclass
class ShapeCheck:
    sizes: list[SizeCheck]

    @property
    def ok(self) -> bool:
        return all(not s.mismatches for s in self.sizes)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "sizes": [
            {"size": s.size, "bindings": s.bindings, "matched": s.matched, "unchecked": s.unchecked,
             "mismatches": [{"tensor": t, "expected": e, "actual": list(a)} for t, e, a in s.mismatches]}
            for s in self.sizes]}


def check_shapes(model: onnx.ModelProto, shapes: SymbolicShapes | None = None, *,
                 max_sizes: int = 3) -> ShapeCheck:
    """Run ``model`` at up to ``max_sizes`` input sizes and compare every tensor's shape with ``shapes``."""
    shapes = shapes or infer_symbolic(model)
    reason = why_unrunnable(model)
    if reason is not None:
        raise cannot_validate(reason)
    check_outputs(serialized_source(model, "original"))
    specs = model_inputs(model)
    sample = resolve_shapes(specs)
    # sizes are checked before anything is allocated: sets over the memory budget are dropped (the first
    # one over it is an error naming the size)
    sets = _with_odd_sizes(specs, size_sets(specs, sample), max_sizes)
    sets = fit_budget(model, specs, sets, default_budget())
    probe = _with_all_outputs(model, shapes)
    results = []
    with open_session(serialized_source(probe, "original"), reuse_memory=False) as opened:
        names = list(opened.output_names)
        for index, size in enumerate(sets):
            plans = plan_inputs(model, specs, dict(size.shapes))
            feeds = generate_inputs(plans, seed=index)
            outputs = opened.run(feeds)  # validation's run: time limit, one-line errors
            values = [outputs[name] for name in names]
            check = SizeCheck(size.name, _bindings(shapes, feeds))
            for name, value in zip(names, values, strict=True):
                _compare(check, shapes, name, tuple(getattr(value, "shape", ())))
            results.append(check)
    return ShapeCheck(results)


def _with_odd_sizes(specs: Sequence[Any], sets: list[SizeSet], count: int) -> list[SizeSet]:
    """Validation's sets vary batch and sequence dims; when they give fewer than ``count`` sizes, add sets where
    every named dim of the sample grows by an odd step (spatial dims too: floors and ceilings differ there)."""
    sample = sets[0].shapes
    named: dict[str, int] = {}
    for spec in specs:
        for dim, size in zip(spec.dims or (), sample[spec.name], strict=False):
            if isinstance(dim, str):
                named.setdefault(dim, int(size))
    step = 1
    while len(sets) < count and named and step < 16:
        grown = {name: size + step for name, size in named.items()}
        shapes = {spec.name: tuple(grown.get(d, size) if isinstance(d, str) else size
                                   for d, size in zip(spec.dims or (), sample[spec.name], strict=False))
                  for spec in specs}
        if all(shapes != s.shapes for s in sets):
            sets.append(SizeSet(f"odd+{step}", shapes))
        step += 6
    return sets[:count]


def _bindings(shapes: SymbolicShapes, feeds: dict[str, Any]) -> dict[str, int]:
    bindings: dict[str, int] = dict(shapes.bindings)
    for name, value in feeds.items():
        for dim, size in zip(shapes.shape(name) or (), value.shape, strict=False):
            if isinstance(dim, symdim.Expr) and len(dim.terms) == 1:
                (monomial, coeff), = dim.terms
                if coeff == 1 and len(monomial) == 1 and monomial[0][1] == 1 and \
                        isinstance(monomial[0][0], symdim.Sym):
                    bindings.setdefault(monomial[0][0].name, int(size))
    return bindings


def _compare(check: SizeCheck, shapes: SymbolicShapes, name: str, actual: tuple[int, ...]) -> None:
    expected = shapes.shape(name)
    if expected is None or any(d is None for d in expected):
        check.unchecked += 1
        return
    try:
        values = tuple(symdim.evaluate(d, check.bindings) for d in expected if d is not None)
    except (KeyError, ZeroDivisionError):
        check.unchecked += 1
        return
    if values == actual:
        check.matched += 1
    else:
        check.mismatches.append((name, str([symdim.text(d) for d in expected]), actual))


def _with_all_outputs(model: onnx.ModelProto, shapes: SymbolicShapes) -> onnx.ModelProto:
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    graph = probe.graph
    present = {o.name for o in graph.output} | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        for name in node.output:
            if name and name not in present and shapes.dtype(name):
                graph.output.append(onnx.helper.make_tensor_value_info(name, shapes.dtype(name), None))
                present.add(name)
    return probe


def check_summary(check: ShapeCheck, limit: int = 5) -> Sequence[str]:
    lines = []
    for size in check.sizes:
        binding = ", ".join(f"{k}={v}" for k, v in sorted(size.bindings.items()))
        lines.append(f"{size.size} ({binding}): {size.matched} tensors match onnxruntime, "
                     f"{len(size.mismatches)} differ, {size.unchecked} not checkable")
        for tensor, expected, actual in size.mismatches[:limit]:
            lines.append(f"  {tensor}: expected {expected}, onnxruntime {list(actual)}")
    return lines
