"""Test helpers for pattern and plugin authors (also loaded as a pytest plugin: fixture ``gsrewrite_registry``).

::

    from gsrewrite.testing import model_from_text, assert_rewrite, assert_no_rewrite

    model = model_from_text('''
        g (float[2, 8] x) => (float[2, 8] y) {
            y = Relu (x)
        }''', opset=17)
    assert_rewrite(model, ["my-pattern"], {"my-pattern": 1}, produces={"MyOp": 1})

Importing this module is cheap: onnxruntime is imported only when a helper validates.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

__all__ = [
    "assert_no_rewrite",
    "assert_numerically_equal",
    "assert_rewrite",
    "model_from_text",
    "op_counts",
]


def model_from_text(graph_text: str, *, opset: int = 17, initializers: Mapping[str, np.ndarray] | None = None,
                    extra_opsets: Mapping[str, int] | None = None, ir_version: int = 8) -> onnx.ModelProto:
    """A model from a graph in the ONNX textual syntax, plus initializers given as numpy arrays."""
    imports = ", ".join([f'"": {opset}', *(f'"{d}": {v}' for d, v in (extra_opsets or {}).items())])
    model = onnx.parser.parse_model(f"<ir_version: {ir_version}, opset_import: [{imports}]>\n{graph_text}")
    for name, value in (initializers or {}).items():
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    onnx.checker.check_model(model)
    return model


def op_counts(model: onnx.ModelProto) -> Counter:
    """Op types of the top-level graph (domain-qualified for non-standard domains)."""
    return Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in model.graph.node)


def assert_rewrite(model: onnx.ModelProto | str | os.PathLike, patterns: Sequence[str],
                   expected: Mapping[str, int], *, target: str = "ort", device: str = "cpu",
                   produces: Mapping[str, int] | None = None, absent: Iterable[str] = (),
                   pattern_files: Iterable[str] = (), inputs: Any = None, atol: float = 1e-4, rtol: float = 1e-3,
                   registry: Any = None) -> Any:
    """Apply ``patterns``; assert the per-pattern match counts, the ops produced/absent, and that onnxruntime
    finds the result equivalent to the original. Returns the RewriteResult."""
    from gsrewrite.pipelines import ValidationOptions, apply

    result = apply(model, list(patterns), target=target, device=device, pattern_files=pattern_files,
                   registry=registry, validate=ValidationOptions(inputs=inputs, atol=atol, rtol=rtol))
    counts = {k: v for k, v in result.counts.items() if v}
    assert counts == dict(expected), f"expected matches {dict(expected)}, got {counts} (skipped: {result.skipped})"
    assert not result.dropped, f"validation dropped patterns: {result.dropped}"
    if result.changed:
        assert result.validation is not None and result.validation.ok, "rewritten model does not validate"
    ops = op_counts(result.model)
    for op, count in (produces or {}).items():
        assert ops.get(op, 0) == count, f"expected {count} x {op}, the result has {ops.get(op, 0)}: {dict(ops)}"
    for op in absent:
        assert ops.get(op, 0) == 0, f"expected no {op} left, the result has {ops[op]}"
    return result


def assert_no_rewrite(model: onnx.ModelProto, patterns: Sequence[str], *, target: str = "ort",
                      device: str = "cpu", registry: Any = None) -> Any:
    """Assert that ``patterns`` leave ``model`` unchanged; returns the RewriteResult (with near misses)."""
    from gsrewrite.pipelines import apply

    result = apply(model, list(patterns), target=target, device=device, validate=False, explain=True,
                   registry=registry)
    assert not result.changed, f"expected no rewrite, got {dict(result.counts)}"
    return result


def assert_numerically_equal(original: onnx.ModelProto | str, candidate: onnx.ModelProto | str, *,
                             inputs: Any = None, atol: float = 1e-4, rtol: float = 1e-3, runs: int = 1) -> Any:
    """Assert that onnxruntime gives the same outputs for both models; returns the ValidationReport."""
    from gsrewrite.validation import validate

    report = validate(original, candidate, inputs=inputs, atol=atol, rtol=rtol, runs=runs)
    assert report.ok, report.summary()
    return report


try:  # the pytest plugin part: only when pytest is there
    import pytest

    @pytest.fixture
    def gsrewrite_registry() -> Any:
        """A fresh pattern registry filled by every installed plugin."""
        from gsrewrite.patterns import default_registry

        return default_registry()

except ImportError:  # pragma: no cover
    pass
