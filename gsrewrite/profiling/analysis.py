"""The library entry points: ``gsrewrite.infer_shapes()``, ``gsrewrite.profile()``, ``gsrewrite.plan_memory()``
(which sizes the symbols no binding gives with validation's input planner: the profiler sits above validation).

Each takes a model (``ModelProto`` or path) and input shapes as ``--input-shape`` strings (``"ids:2,seq"``,
``"seq=128"``) or a mapping ``{"ids": [2, "seq"], "seq": 128}``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import onnx

from gsrewrite.profiling.costs import Profile, profile_model
from gsrewrite.profiling.memory import MemoryPlan
from gsrewrite.profiling.memory import plan_memory as plan
from gsrewrite.profiling.subgraphs import inline_functions
from gsrewrite.shapes import symdim
from gsrewrite.shapes.input_shapes import InputShapes, as_input_shapes
from gsrewrite.shapes.walk import SymbolicShapes, infer_symbolic
from gsrewrite.stages import stage

ModelArg = onnx.ModelProto | str | os.PathLike
ShapesArg = InputShapes | Iterable[str] | Mapping[str, Any] | None


def load(model: ModelArg, *, load_external_data: bool = True) -> onnx.ModelProto:
    """The model; a path without ``load_external_data`` is loaded weightless (its large weights stay in the
    file: shapes and memory planning never read them)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if not load_external_data:
        from gsrewrite.model_io.weightless import load_weightless

        return load_weightless(model)
    from gsrewrite.model_io import load_model

    return load_model(model)


def input_shapes(value: ShapesArg) -> InputShapes:
    """Normalize the accepted forms of input shapes (:func:`gsrewrite.shapes.input_shapes.as_input_shapes`)."""
    return as_input_shapes(value)


def infer_shapes(model: ModelArg, shapes: ShapesArg = None) -> SymbolicShapes:
    """Symbolic shapes of every tensor (see :mod:`gsrewrite.shapes.walk`)."""
    return infer_symbolic(load(model, load_external_data=False), input_shapes(shapes))


def profile(model: ModelArg, shapes: ShapesArg = None, *, sparsity: bool = True) -> Profile:
    """MACs, parameters, weight and activation bytes, sparsity per node (see :mod:`gsrewrite.profiling.costs`).
    A path is loaded without its weights (:mod:`gsrewrite.model_io.weightless`): they are read in chunks for the
    sparsity, never loaded whole; ``sparsity=False`` reads none of them (every weight byte is read otherwise)."""
    if isinstance(model, onnx.ModelProto):
        return profile_model(model, input_shapes(shapes), sparsity=sparsity)
    from gsrewrite.model_io.weightless import load_weightless

    path = os.fspath(model)
    with stage("loading"):
        proto = load_weightless(path)
    return profile_model(proto, input_shapes(shapes), base_dir=os.path.dirname(os.path.abspath(path)),
                         sparsity=sparsity)


def default_bindings(model: onnx.ModelProto, result: SymbolicShapes) -> dict[str, int]:
    """Sizes for the symbols no binding gives: validation's sample sizes of the inputs, from its input planner
    (batch 2, sequence 16 unless the model says otherwise; a decoder's decode step; the sizes given kept)."""
    from gsrewrite.errors import InputDataError, UsageError
    from gsrewrite.validation.dims import input_dims
    from gsrewrite.validation.shapes import resolve_shapes
    from gsrewrite.validation.signature import model_inputs

    bindings = dict(result.bindings)
    specs = model_inputs(model)
    declared = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    try:
        dims = input_dims(model, {k: v for k, v in bindings.items() if k in declared}, specs)
        sample = dims.shapes(dims.sample_bindings())
    except (InputDataError, UsageError):  # dims the planner cannot size: the plain rules
        try:
            sample = resolve_shapes(specs)
        except Exception:  # no sample for an odd input: the caller reports the unbound symbols
            return bindings
    for name, shape in sample.items():
        for dim, size in zip(result.shape(name) or (), shape, strict=False):
            symbol = symdim.symbol_name(dim)
            if symbol is not None:
                bindings.setdefault(symbol, int(size))
    return bindings


def plan_memory(model: ModelArg, shapes: ShapesArg = None) -> MemoryPlan:
    """The activation memory plan at the given sizes (symbols not given take validation's sample sizes); the
    tensors inside local functions are planned too (the functions are inlined, as onnxruntime does)."""
    proto = inline_functions(load(model, load_external_data=False))
    result = infer_symbolic(proto, input_shapes(shapes))
    bindings = default_bindings(proto, result)
    return plan(proto, result, bindings)
