"""Numeric validation of a rewritten model against its original with onnxruntime.

::

    from gsrewrite.validation import validate
    report = validate("model.onnx", "model.opt.onnx", input_shapes={"batch": 1}, runs=3)
    assert report.ok, report.summary()

See ``docs/validation.md`` for the metrics, the pass/fail rule, the input sizes validated, how inputs are
generated and the memory budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gsrewrite import _lazy

if TYPE_CHECKING:  # the names below, imported on first use: importing one submodule (dims for `memory`)
    # must not import every other one (the validator, onnxruntime's runner, numpy.random)
    from gsrewrite.shapes.input_shapes import InputShapes, parse_input_shapes
    from gsrewrite.validation.criteria import Criterion
    from gsrewrite.validation.given_inputs import load_npz, prepare_inputs
    from gsrewrite.validation.inputs import InputPlan, generate_inputs, plan_inputs
    from gsrewrite.validation.memory import MemoryBudgetError
    from gsrewrite.validation.metrics import compare_output
    from gsrewrite.validation.report import OutputComparison, ValidationReport
    from gsrewrite.validation.shapes import resolve_shapes
    from gsrewrite.validation.signature import InputSpec, model_inputs
    from gsrewrite.validation.sizes import SizeSet, size_sets
    from gsrewrite.validation.validator import Validator, validate

#: public name -> the module that defines it
_LAZY = {
    "InputShapes": "gsrewrite.shapes.input_shapes",
    "parse_input_shapes": "gsrewrite.shapes.input_shapes",
    "Criterion": "gsrewrite.validation.criteria",
    "load_npz": "gsrewrite.validation.given_inputs",
    "prepare_inputs": "gsrewrite.validation.given_inputs",
    "InputPlan": "gsrewrite.validation.inputs",
    "generate_inputs": "gsrewrite.validation.inputs",
    "plan_inputs": "gsrewrite.validation.inputs",
    "MemoryBudgetError": "gsrewrite.validation.memory",
    "compare_output": "gsrewrite.validation.metrics",
    "OutputComparison": "gsrewrite.validation.report",
    "ValidationReport": "gsrewrite.validation.report",
    "resolve_shapes": "gsrewrite.validation.shapes",
    "InputSpec": "gsrewrite.validation.signature",
    "model_inputs": "gsrewrite.validation.signature",
    "SizeSet": "gsrewrite.validation.sizes",
    "size_sets": "gsrewrite.validation.sizes",
    "Validator": "gsrewrite.validation.validator",
    "validate": "gsrewrite.validation.validator",
}

__all__ = [
    "Criterion",
    "InputPlan",
    "InputShapes",
    "InputSpec",
    "MemoryBudgetError",
    "OutputComparison",
    "SizeSet",
    "ValidationReport",
    "Validator",
    "compare_output",
    "generate_inputs",
    "load_npz",
    "model_inputs",
    "parse_input_shapes",
    "plan_inputs",
    "prepare_inputs",
    "resolve_shapes",
    "size_sets",
    "validate",
]


__getattr__, __dir__ = _lazy.facade(__name__, _LAZY, __all__)
