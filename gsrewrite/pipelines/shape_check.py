"""Check symbolic shapes against onnxruntime: run the model at up to three input sizes with every intermediate
tensor as an output, and compare each tensor's actual shape with its expression evaluated at that size.

The sizes come from validation's input planner (:mod:`gsrewrite.validation.dims`): the input shapes given
(``--input-shape``, as the inference got them) are kept, the other dims follow the graph's relations; the
sample is grown (as validation grows it) until onnxruntime accepts it (a detector wants sizes a multiple of its
stride), then smaller, longer and odd sizes are added; one onnxruntime rejects is skipped and said so, not
counted as wrong. The symbols are bound from the inputs (a bare symbol dim of an input takes the size fed
there); a tensor whose expression is unknown or names a symbol no input binds (``NonZero``'s count) is counted
as not checkable, not as wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.errors import CannotValidateError, InputDataError, ValidationError
from gsrewrite.shapes import symdim
from gsrewrite.shapes.walk import SymbolicShapes, infer_symbolic
from gsrewrite.validation.dims import InputDims, input_dims
from gsrewrite.validation.input_sets import fit_budget
from gsrewrite.validation.inputs import generate_inputs, plan_inputs
from gsrewrite.validation.memory import MemoryBudgetError, default_budget
from gsrewrite.validation.runner import cannot_validate, check_outputs, open_session, serialized_source, why_unrunnable
from gsrewrite.validation.signature import model_inputs
from gsrewrite.validation.sizes import SizeSet, related_size_sets
from gsrewrite.validation.validator import input_attempts

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
    #: sizes onnxruntime rejected (not the model's sizes: a detector wants multiples of its stride): (size, why)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(not s.mismatches for s in self.sizes)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "sizes": [
            {"size": s.size, "bindings": s.bindings, "matched": s.matched, "unchecked": s.unchecked,
             "mismatches": [{"tensor": t, "expected": e, "actual": list(a)} for t, e, a in s.mismatches]}
            for s in self.sizes], "skipped": [{"size": name, "reason": why} for name, why in self.skipped]}


def check_shapes(model: onnx.ModelProto, shapes: SymbolicShapes | None = None, *,
                 max_sizes: int = 3) -> ShapeCheck:
    """Run ``model`` at up to ``max_sizes`` input sizes and compare every tensor's shape with ``shapes`` (the
    input shapes they were inferred with are kept)."""
    shapes = shapes or infer_symbolic(model)
    reason = why_unrunnable(model)
    if reason is not None:
        raise cannot_validate(reason)
    check_outputs(serialized_source(model, "original"))
    specs = model_inputs(model)
    dims = input_dims(model, _given(model, shapes), specs)
    probe = _with_all_outputs(model, shapes)
    results: list[SizeCheck] = []
    skipped: list[tuple[str, str]] = []
    with open_session(serialized_source(probe, "original"), reuse_memory=False) as opened:
        names = list(opened.output_names)

        def run(size: SizeSet, seed: int) -> SizeCheck:
            plans = plan_inputs(model, specs, dict(size.shapes), positions_start=size.positions_start)
            feeds = generate_inputs(plans, seed=seed)
            outputs = opened.run(feeds)  # validation's run: time limit, one-line errors
            check = SizeCheck(size.name, _bindings(shapes, feeds))
            for name in names:
                _compare(check, shapes, name, tuple(getattr(outputs[name], "shape", ())))
            return check

        sets, first_failure = _sample(model, specs, dims, run, results)
        if not results:
            raise ValidationError(f"onnxruntime rejects every input size tried: {first_failure}")
        for index, size in enumerate(sets[1:], start=1):
            if len(results) >= max_sizes:
                break
            try:
                results.append(run(size, index))
            except CannotValidateError:
                raise  # out of time: other sizes cannot help
            except (ValidationError, InputDataError) as exc:
                skipped.append((size.name, str(exc).splitlines()[0]))
                log.info("shapes --check skips %s: onnxruntime rejects it (%s)", size.describe(), skipped[-1][1])
    return ShapeCheck(results, skipped)


def _sample(model: onnx.ModelProto, specs: Sequence[Any], dims: InputDims, run: Any,
            results: list[SizeCheck]) -> tuple[list[SizeSet], str]:
    """The first sizes onnxruntime accepts (validation's sample, grown as validation grows it), checked into
    ``results``, and the sizes to try after them; else the first failure."""
    failure = ""
    for candidate, other in input_attempts(dims):
        try:
            sets = fit_budget(model, specs, _with_odd_sizes(candidate, other), default_budget())
        except MemoryBudgetError:
            raise
        except InputDataError as exc:
            failure = failure or str(exc).splitlines()[0]
            continue
        try:
            results.append(run(sets[0], 0))
            return sets, failure
        except CannotValidateError:
            raise
        except (ValidationError, InputDataError) as exc:
            failure = failure or str(exc).splitlines()[0]
            log.info("shapes --check: onnxruntime rejects %s: %s", sets[0].describe(), failure)
    return [], failure


def _given(model: onnx.ModelProto, shapes: SymbolicShapes) -> dict[str, Any]:
    """The input shapes the inference was given, as the input planner takes them: whole inputs whose dims are all
    numbers, and the sizes bound to the symbols the inputs declare."""
    declared = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    given: dict[str, Any] = {name: size for name, size in shapes.bindings.items() if name in declared}
    initializers = {t.name for t in model.graph.initializer}
    for value_info in model.graph.input:
        shape = shapes.shape(value_info.name)
        tensor_type = value_info.type.tensor_type
        if value_info.name in initializers or shape is None or not tensor_type.HasField("shape") or \
                not all(isinstance(d, int) for d in shape) or \
                all(d.HasField("dim_value") for d in tensor_type.shape.dim):
            continue
        given[value_info.name] = tuple(int(d) for d in shape)  # type: ignore[arg-type]
    return given


def _with_odd_sizes(dims: InputDims, other: int) -> list[SizeSet]:
    """Validation's sets (sample, small, long) and, after them, the free dims grown by odd steps (floors and
    ceilings differ there) and doubled."""
    bindings = dims.sample_bindings(other)
    sets = related_size_sets(dims, bindings)
    free = [name for name in bindings if name not in dims.fixed]
    grown: list[tuple[str, Mapping[str, int]]] = [(f"odd+{step}", {n: bindings[n] + step for n in free})
                                                   for step in (1, 7)]
    grown.append(("double", {n: 2 * bindings[n] for n in free}))
    for name, sizes in grown:
        if not free:
            break
        try:
            shapes = dims.shapes({**bindings, **sizes})
        except InputDataError:
            continue
        if all(shapes != s.shapes for s in sets):
            sets.append(SizeSet(name, shapes, {**bindings, **sizes}, dims.positions_start({**bindings, **sizes})))
    return sets


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
