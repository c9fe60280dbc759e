"""Fixtures for the simplify tests: run chosen passes and check the result with onnxruntime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
import pytest

from gsrewrite.pipelines import SimplifyLimits, ValidationOptions, simplify
from gsrewrite.simplifier import SimplifyResult


@pytest.fixture
def simplified() -> Callable[..., SimplifyResult]:
    """``simplified(model, *passes, **options)``: run ``passes`` (all defaults when none), assert that the
    result is a valid model that onnxruntime finds equal to the original, and return the SimplifyResult."""

    def run(model: onnx.ModelProto, *passes: str, **options: Any) -> SimplifyResult:
        validation = ValidationOptions(**options.pop("validation_options", None) or {}) \
            if options.pop("validate", True) else False
        if "max_fold_bytes" in options:
            options["limits"] = SimplifyLimits(max_fold_bytes=options.pop("max_fold_bytes"))
        result = simplify(model, only=list(passes) or None, validate=validation, **options)
        assert not result.dropped, f"validation dropped {result.dropped}"
        onnx.checker.check_model(result.model, full_check=True)
        if result.changed and validation:
            assert result.validation is not None and result.validation.ok, result.validation.summary()
        return result

    return run
