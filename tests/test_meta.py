"""Meta-tests: every pattern is described; every shell block of the docs runs.

That every pattern also *fires* (rewrites something in some test) is checked at the end of a whole-suite run
by tests/conftest.py, which records the patterns that rewrote something during the session.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gsrewrite.patterns import default_registry
from gsrewrite.testing import assert_rewrite, model_from_text

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("pattern", default_registry().patterns, ids=lambda p: p.name)
def test_every_pattern_is_described(pattern):
    assert pattern.description, f"{pattern.name} has no description"


def test_the_firing_check_records_a_real_rewrite(pytestconfig):
    """The session-end firing check (tests/conftest.py) is active and sees what the rewrite pass does."""
    checks = pytestconfig.pluginmanager.get_plugin("gsrewrite-meta-checks")
    assert checks is not None
    checks.recorder.fired.discard("matmul-add")
    model = model_from_text("""
    g (float[2, 4] x) => (float[2, 3] y) {
        m = MatMul (x, w)
        y = Add (m, b)
    }""", initializers={"w": np.ones((4, 3), np.float32), "b": np.ones(3, np.float32)})
    assert_rewrite(model, ["matmul-add"], {"matmul-add": 1})
    assert "matmul-add" in checks.recorder.fired
    silent = type(checks).silent_patterns
    assert silent(["matmul-add", "never"], checks.recorder.fired) == ["never"]


def _bash_blocks(path: Path) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S)


def _gsrewrite_env(tmp_path: Path) -> dict[str, str]:
    """PATH with this interpreter's `gsrewrite` first; the example model copied into the working folder."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_shell_block_in_the_docs_runs(doc, tmp_path):
    env = _gsrewrite_env(tmp_path)
    for block in _bash_blocks(doc):
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{doc.name} block failed:\n{block}\n{result.stderr[-2000:]}"


def test_the_readme_main_job_runs(tmp_path):
    """The README's first command, minus making the venv and installing (CI does that): the job itself."""
    first = _bash_blocks(ROOT / "README.md")[0]
    job = first.split("&&")[-1].strip().replace(".venv/bin/", "")
    assert job.startswith("gsrewrite ")
    result = subprocess.run(["bash", "-c", job], cwd=tmp_path, env=_gsrewrite_env(tmp_path),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    outputs = [word for word in job.split() if word.endswith(".onnx") and not word.startswith("examples/")]
    assert outputs and all((tmp_path / out).stat().st_size > 0 for out in outputs)
