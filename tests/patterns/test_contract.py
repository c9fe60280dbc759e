"""The template <-> Python contract: a check or computation declares the names it reads (``reads``); a pattern
whose templates lack a declared name fails to load naming file and line; reading an undeclared name raises (the
test suite runs with GSREWRITE_STRICT_READS=1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import gsrewrite
from gsrewrite.engine.match import UnknownNameError
from gsrewrite.errors import PatternError
from gsrewrite.patterns.registry import PatternRegistry
from gsrewrite.plugin_api import reads
from gsrewrite.testing import model_from_text

PATTERN = '''family = "t"

[[pattern]]
name = "relu-relu"
checks = ["{check}"]
match = "g (x) => (y) {{ [first] r = Relu (x)  y = Relu (r) }}"
replace = "g (x) => (y) {{ y = Relu (x) }}"
'''
MODEL = "g (float[2, 3] x) => (float[2, 3] y) { r = Relu (x)  y = Relu (r) }"


@reads("first", "x")
def declared_and_present(match):
    return None if match.node("first") is not None and match.tensor("x") is not None else "unbound"


@reads("renamed_input")
def declared_but_missing(match):
    return None


@reads("x")
def reads_more_than_declared(match):
    return None if match.tensor("r") is not None else "no r"


def _registry(tmp_path: Path, check: str, function) -> tuple[PatternRegistry, list]:
    registry = PatternRegistry()
    registry.add_check(check, function)
    (tmp_path / "p.toml").write_text(PATTERN.format(check=check))
    return registry, registry.add_file(tmp_path / "p.toml")


def test_declared_names_the_template_has_load_and_match(tmp_path):
    registry, patterns = _registry(tmp_path, "ok", declared_and_present)
    registry.verify(patterns)
    result = gsrewrite.apply(model_from_text(MODEL), ["relu-relu"], registry=registry, validate=False)
    assert result.counts == {"relu-relu": 1}


def test_a_declared_name_no_template_has_is_a_load_error_with_file_and_line(tmp_path):
    registry, patterns = _registry(tmp_path, "stale", declared_but_missing)
    with pytest.raises(PatternError, match=r"p\.toml:4: pattern 'relu-relu': check 'stale' reads 'renamed_input'"):
        registry.verify(patterns)


def test_reading_an_undeclared_name_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("GSREWRITE_STRICT_READS", "1")
    registry, patterns = _registry(tmp_path, "sneaky", reads_more_than_declared)
    registry.verify(patterns)
    with pytest.raises(UnknownNameError, match="reads 'r', which it does not declare"):
        gsrewrite.apply(model_from_text(MODEL), ["relu-relu"], registry=registry, validate=False)


def test_patterns_check_reports_a_stale_declaration_of_a_built_in_check(tmp_path):
    (tmp_path / "bn.toml").write_text(PATTERN.format(check="inference_batchnorm"))  # it reads node 'bn'
    done = subprocess.run([str(Path(sys.executable).parent / "gsrewrite"), "patterns", "check", "bn.toml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "bn.toml:4: pattern 'relu-relu': check 'inference_batchnorm' reads 'bn'" in done.stdout


def undeclared_typo(match):
    return None if match.tensor("xx") is None else "bound"


def test_an_undeclared_function_reading_a_name_no_template_has_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("GSREWRITE_STRICT_READS", "0")  # the production setting
    registry, patterns = _registry(tmp_path, "typo", undeclared_typo)
    registry.verify(patterns)  # nothing declared: nothing to verify at load
    with pytest.raises(UnknownNameError, match="reads 'xx', which no template of the pattern has"):
        gsrewrite.apply(model_from_text(MODEL), ["relu-relu"], registry=registry, validate=False)
