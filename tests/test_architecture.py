"""The architecture as tests: the import-linter contracts of pyproject.toml (layers, no cycles between sibling
modules, plugins through gsrewrite.plugin_api), run the way `lint-imports` runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_the_import_contracts_hold():
    done = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    contracts = len(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"])
    assert f"{contracts} kept, 0 broken" in done.stdout


def test_mypy_is_clean():
    """mypy over gsrewrite and the built-in plugins ([tool.mypy] in pyproject.toml) reports no error."""
    done = subprocess.run([str(BIN / "mypy"), "--cache-dir", str(ROOT / ".mypy_cache")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
