"""Fixtures for the simplify tests: run chosen passes and check the result with onnxruntime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
import pytest

from gsrewrite.pipelines.simplify import simplify_model
from gsrewrite.simplifier import SimplifyResult


@pytest.fixture
def simplified() -> Callable[..., SimplifyResult]:
    """``simplified(model, *passes, **options)``: run ``passes`` (all defaults when none), assert that the
    result is a valid model that onnxruntime finds equal to the original, and return the SimplifyResult."""

    def run(model: onnx.ModelProto, *passes: str, **options: Any) -> SimplifyResult:
        validation = dict(options.pop("validation_options", None) or {}) if options.pop("validate", True) else None
        result = simplify_model(model, only=list(passes) or None, validation=validation, **options)
        assert not result.dropped, f"validation dropped {result.dropped}"
        onnx.checker.check_model(result.model, full_check=True)
        if result.changed and validation is not None:
            assert result.validation is not None and result.validation.ok, result.validation.summary()
        return result

    return run
