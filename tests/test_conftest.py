"""The suite's own settings (tests/conftest.py): the opt-in tiers (``@pytest.mark.opt_in``) as a developer runs
them, a plain ``pytest`` not collecting them at all (nothing collected, then skipped), their environment variable
or ``-m slow`` collecting them; and the bytecode cache of the suite's subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIER_VARIABLES = ("GSREWRITE_HOSTILE_FULL", "GSREWRITE_FUZZ_SLOW", "GSREWRITE_SCALE_FULL")


@pytest.fixture
def conftest(pytestconfig: pytest.Config) -> ModuleType:
    """tests/conftest.py as pytest loaded it (not by import: tests/simplify has a conftest module too)."""
    path = str(Path(__file__).with_name("conftest.py"))
    return next(p for p in pytestconfig.pluginmanager.get_plugins() if getattr(p, "__file__", None) == path)


def _collected(*args: str, **env: str) -> list[str]:
    """The test ids ``pytest --collect-only`` lists for ``args``, with only the tier variables of ``env`` set."""
    clean = {k: v for k, v in os.environ.items() if k not in TIER_VARIABLES}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=clean | env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_a_tier_is_collected_with_its_variable_and_only_its_own() -> None:
    ids = _collected("tests/test_analysis_scale.py", "tests/test_hostile_corpus.py", GSREWRITE_SCALE_FULL="1")
    scale = [i for i in ids if "test_analysis_scale.py::" in i]
    assert sum("::test_a_long_chain_scales_linearly" in i for i in scale) == 4
    assert sum("::test_weights_listed_as_inputs" in i for i in scale) == 4
    hostile = [i for i in ids if "test_hostile_corpus.py::" in i]
    assert any("::test_hostile_model_fails_cleanly[" in i for i in hostile)
    assert not any("every_command" in i for i in hostile)  # not asked for: not collected, not even as skipped


def test_minus_m_slow_selects_a_tier() -> None:
    ids = _collected("tests/test_analysis_scale.py", "-m", "slow")
    assert len(ids) == 4 and all("::test_a_long_chain_scales_linearly" in i for i in ids)


def test_subprocesses_cache_their_bytecode_outside_the_sources_when_python_would_not(
        conftest: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    cache = SimpleNamespace(mkdir=lambda name: tmp_path / "cache" / name)
    conftest._cache_bytecode_of_subprocesses(SimpleNamespace(cache=cache))
    prefix = tmp_path / "cache" / "subprocess-pycache"
    assert os.environ["PYTHONPYCACHEPREFIX"] == str(prefix) and "PYTHONDONTWRITEBYTECODE" not in os.environ
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mod.py").write_text("X = 1\n")
    subprocess.run([sys.executable, "-c", "import mod"], cwd=tmp_path / "src", check=True, timeout=60)
    assert list(prefix.rglob("mod*.pyc")) and not (tmp_path / "src" / "__pycache__").exists()


def test_a_chosen_prefix_and_no_cache_folder_are_left_alone(conftest: ModuleType,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/mine")
    conftest._cache_bytecode_of_subprocesses(SimpleNamespace(cache=None))
    conftest._cache_bytecode_of_subprocesses(SimpleNamespace(cache=SimpleNamespace(mkdir=None)))
    assert os.environ["PYTHONPYCACHEPREFIX"] == "/mine" and os.environ["PYTHONDONTWRITEBYTECODE"] == "1"
