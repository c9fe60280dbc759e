"""Meta-tests: every pattern is described and tested; every shell block of the docs runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gsrewrite.patterns import default_registry

ROOT = Path(__file__).resolve().parent.parent
PATTERN_TESTS = "\n".join(p.read_text() for p in (ROOT / "tests" / "patterns").glob("test_*.py"))


@pytest.mark.parametrize("pattern", default_registry().patterns, ids=lambda p: p.name)
def test_every_pattern_is_described_and_tested(pattern):
    assert pattern.description, f"{pattern.name} has no description"
    assert pattern.family in PATTERN_TESTS or pattern.name in PATTERN_TESTS, (
        f"no test in tests/patterns names pattern {pattern.name!r} or its family {pattern.family!r}")


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
