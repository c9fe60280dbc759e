"""Fragments: what every variant needs is known without expanding; expansion happens on first use only."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from gsrewrite.errors import PatternError
from gsrewrite.patterns import PatternRegistry
from gsrewrite.patterns.pattern import parse_pattern_data
from gsrewrite.pipelines import apply
from gsrewrite.testing import model_from_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PATTERN = '''
family = "relu-square"

[[fragment]]
name = "Square"
forms = [
  "Square (x) => (y) <float two = {2.0}> { y = Pow (x, two) }",
  "Square (x) => (y) { y = Mul (x, x) }",
]

[[fragment]]
name = "MaybeNeg"
forms = [
  "MaybeNeg (x) => (y) { y = Neg (x) }",
  "MaybeNeg (x) => (y) { y = Identity (x) }",
]

[[pattern]]
name = "relu-square"
match = """
rs (x) => (y) {
  r = Relu (x)
  n = alt.MaybeNeg (r)
  y = alt.Square (n)
}
"""
replace = "rs (x) => (y) { r = Relu (x)  a = Abs (x)  y = Mul (r, a) }"  # relu(x)^2, not matchable again
'''


def _patterns(text: str = PATTERN) -> list:
    return parse_pattern_data(tomllib.loads(text), "test.toml")


def test_required_ops_are_what_every_variant_has() -> None:
    pattern = _patterns()[0]
    # Relu in every variant; Pow or Mul depending on the form; Neg is optional
    assert dict(pattern.required_ops) == {("", "Relu"): 1}
    assert "variants" not in pattern.__dict__  # not expanded to find that out
    assert len(pattern.variants) == 4
    for variant in pattern.variants:
        ops = {(n.domain, n.op) for n in variant.template.nodes}
        assert set(pattern.required_ops) <= ops


def test_a_pattern_the_graph_cannot_hold_is_never_expanded(tmp_path) -> None:
    path = tmp_path / "rs.toml"
    path.write_text(PATTERN)
    registry = PatternRegistry()
    registry.add_file(path)
    pattern = registry.select(["relu-square"])[0]
    no_relu = model_from_text("agraph (float[4] x) => (float[4] y) { y = Mul (x, x) }")
    result = apply(no_relu, ["relu-square"], registry=registry, validate=False)
    assert not result.changed and "variants" not in pattern.__dict__
    model = model_from_text("agraph (float[4] x) => (float[4] y) { r = Relu (x)  y = Pow (r, two) }",
                            initializers={"two": np.array(2.0, np.float32)})
    result = apply(model, ["relu-square"], registry=registry)
    assert result.counts["relu-square"] == 1 and "variants" in pattern.__dict__


def test_unknown_fragment_and_too_many_variants_fail_at_load() -> None:
    with pytest.raises(PatternError, match=r"unknown fragment alt\.Cube"):
        _patterns(PATTERN.replace("alt.Square (n)", "alt.Cube (n)"))
    many = PATTERN.replace('''  n = alt.MaybeNeg (r)
  y = alt.Square (n)''', "\\n".join(f"  n{i} = alt.Square ({'r' if i == 0 else f'n{i - 1}'})" for i in range(10))
                             + "\\n  y = Relu (n9)")
    with pytest.raises(PatternError, match="more than 512 variants"):
        _patterns(many)
