"""Template lint, run when a pattern file loads: every op of the standard domain must exist in ONNX at the
pattern's opsets, and a fragment of the file is called as ``alt.NAME`` (written without ``alt.`` it would be
looked up as an ONNX op and never match). Errors name the file and the line. Custom domains (``com.microsoft``
...) and the ``ort`` target's replacements (onnxruntime registers some of its own ops, SimplifiedLayerNormalization,
in the default domain) are not checked here: onnxruntime decides at validation, where a candidate it cannot load
is dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import onnx

from gsrewrite.errors import PatternError
from gsrewrite.patterns.template import TemplateGraph

STANDARD = ("", "ai.onnx")


def lint(patterns: Sequence[Any], path: str, text: str) -> None:
    """Raise :class:`PatternError` (``FILE:LINE: ...``) for the first unknown or too-new standard op."""
    for pattern in patterns:
        for label, template in _templates(pattern):
            for node in template.nodes:
                if node.is_fragment_call or (node.domain or "") not in STANDARD:
                    continue
                problem = op_problem(node.op, pattern.opset, pattern.fragments)
                if problem:
                    raise PatternError(f"{path}:{line_of(text, node.op)}: pattern {pattern.name!r} ({label}): "
                                       f"{problem}")


def _templates(pattern: Any) -> Iterator[tuple[str, TemplateGraph]]:
    yield "match", pattern.match
    for target, replacement in pattern.replacements.items():
        if target == "onnx":  # the ort target may use onnxruntime's own default-domain ops (SimplifiedLayerNorm...)
            yield f"replace.{target}", replacement
    for fragment in pattern.fragments.values():
        for form in fragment.forms:
            yield f"fragment {fragment.name}", form


def op_problem(op: str, opsets: tuple[int, int], fragments: dict[str, Any]) -> str | None:
    """Why ``op`` cannot be a standard ONNX op of a pattern for ``opsets`` (min, max), or None."""
    if not onnx.defs.has(op):
        if op in fragments:
            return f"{op!r} is a fragment of this file: call it as alt.{op}"
        return f"unknown ONNX op {op!r}"
    since = _first_opsets().get(op, 1)
    if since > opsets[1]:
        return f"ONNX op {op!r} exists from opset {since}, but the pattern is for opsets up to {opsets[1]}"
    return None


@functools.cache
def _first_opsets() -> dict[str, int]:
    """Standard op -> the first opset that has it."""
    first: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in STANDARD:
            first[schema.name] = min(first.get(schema.name, schema.since_version), schema.since_version)
    return first


def line_of(text: str, op: str) -> int:
    """The line of the first ``= op (`` in ``text`` (1-based), or 1 when not found."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.replace(" ", "")
        if f"={op}(" in stripped or f"={op}<" in stripped:
            return number
    return 1
