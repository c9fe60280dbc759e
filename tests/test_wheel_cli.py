"""The CLI as users get it: a wheel built from this tree, installed (not editable) into a fresh venv, and its
``gsrewrite`` console script run as a subprocess.

In-process CliRunner tests share the test interpreter's imports, so a module the CLI forgets to import can be
there by accident (``gsrewrite --help`` once crashed for every wheel user with ``importlib.util`` missing while
every in-process test passed). These tests start from nothing but the installed files.

The venv sees this environment's dependencies (onnx, onnxruntime, ...) through a ``.pth`` file of plain paths, so
no network is needed; gsrewrite itself comes from the wheel (checked).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What the wheel is built from (everything pyproject.toml packages).
SOURCES = ("pyproject.toml", "README.md", "gsrewrite", "plugins/gsrewrite_builtins", "patterns")
BIN = "Scripts" if os.name == "nt" else "bin"


def _run(*args: str | Path, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GSREWRITE_", "PYTHON"))}
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd or tempfile.gettempdir())


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _build_wheel(folder: Path) -> Path:
    source = folder / "src"
    for name in SOURCES:
        src, dst = ROOT / name, source / name
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    _ok(_run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
             "--disable-pip-version-check", "-w", folder / "dist", source))
    (wheel,) = (folder / "dist").glob("gsrewrite-*.whl")
    return wheel


def _dependency_paths() -> list[str]:
    """This environment's site-packages folders, for the venv to import the dependencies from."""
    paths = [*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    return list(dict.fromkeys(p for p in paths if p and Path(p).is_dir()))


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding the wheel-installed ``gsrewrite`` console script."""
    return wheel_venv(tmp_path_factory.mktemp("wheel"))


def wheel_venv(folder: Path) -> Path:
    """A fresh venv in ``folder`` with gsrewrite installed from a wheel of this tree; its bin folder."""
    wheel = _build_wheel(folder)
    venv = folder / "venv"
    _ok(_run(sys.executable, "-m", "venv", "--without-pip", venv))
    python = venv / BIN / "python"
    purelib = Path(_ok(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")).stdout.strip())
    # the wheel first: with this environment's packages visible, pip would take an installed gsrewrite as
    # "already satisfied" and install nothing
    _ok(_run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index",
             "--disable-pip-version-check", wheel))
    # then the dependencies, as plain paths, not site.addsitedir: this environment's .pth files (an editable
    # gsrewrite) stay out, and the venv's own site-packages (the wheel's gsrewrite) comes first
    (purelib / "_dependencies.pth").write_text("".join(f"{p}\n" for p in _dependency_paths()))
    seen = _ok(_run(python, "-c", "import gsrewrite, gsrewrite_builtins; print(gsrewrite.__file__)")).stdout
    assert Path(seen.strip()).is_relative_to(purelib), f"gsrewrite imported from {seen}, not the wheel"
    return venv / BIN


def _subcommands(bin_dir: Path) -> list[str]:
    text = _ok(_run(bin_dir / "gsrewrite", "--help")).stdout
    section = text.split("Commands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^\s{2}([a-z][a-z0-9-]*)\s", section, re.MULTILINE)]


def test_bare_gsrewrite_and_help_work(installed: Path) -> None:
    bare = _run(installed / "gsrewrite")
    assert bare.returncode in (0, 2), bare.stderr  # click shows the usage for a bare group
    assert "Traceback" not in bare.stderr and "Usage:" in bare.stdout + bare.stderr
    text = _ok(_run(installed / "gsrewrite", "--help")).stdout
    assert "Usage:" in text and "Commands:" in text
    assert _ok(_run(installed / "gsrewrite", "--version")).stdout.strip().startswith("gsrewrite")


def test_every_subcommand_help_works(installed: Path) -> None:
    names = _subcommands(installed)
    assert {"optimize", "apply", "simplify", "validate", "info", "plugins", "patterns"} <= set(names)
    for name in names:
        result = _ok(_run(installed / "gsrewrite", name, "--help"))
        assert "Usage:" in result.stdout, name


def _readme_commands() -> list[str]:
    """The gsrewrite invocations of the README's shell blocks (the venv/pip set-up around them is the user's)."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part.strip())
                if words and Path(words[0]).name == "gsrewrite":
                    commands.append(part.strip())
    return commands


def test_readme_commands_run_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    commands = _readme_commands()
    assert any(" optimize " in f" {c} " for c in commands), "the README's main command is not found"
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for command in commands:
        words = shlex.split(command)
        _ok(_run(installed / "gsrewrite", *words[1:], cwd=tmp_path))
    assert (tmp_path / "bert-tiny.opt.onnx").stat().st_size > 0


def test_bad_input_is_one_line_and_exit_2(installed: Path, tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    result = _run(installed / "gsrewrite", "optimize", junk, "-o", tmp_path / "out.onnx")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert not (tmp_path / "out.onnx").exists()


def test_analysis_compression_and_bench_commands_run_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    """profile, memory, shapes, compress, bench and optimize --tune as users run them: the installed script."""
    import json

    model = tmp_path / "bert-tiny.onnx"
    shutil.copy(ROOT / "examples" / "bert-tiny.onnx", model)
    gsrewrite = installed / "gsrewrite"
    profile = json.loads(_ok(_run(gsrewrite, "profile", model, "--json", cwd=tmp_path)).stdout)
    assert profile["total"]["macs"] and profile["by_op_type"]["MatMul"]["count"] > 0 and not profile["unprofiled"]
    memory = json.loads(_ok(_run(gsrewrite, "memory", model, "--json", cwd=tmp_path)).stdout)
    assert memory["lower_bound_bytes"] <= memory["arena_bytes"] <= memory["naive_bytes"]
    shapes = _ok(_run(gsrewrite, "shapes", model, "--check", cwd=tmp_path)).stdout
    assert "0 differ" in shapes
    compressed = json.loads(_ok(_run(gsrewrite, "compress", model, "q.onnx", "--strategy", "fp16",
                                     "--bench-runs", "2", "--allow-slower", "--json", cwd=tmp_path)).stdout)
    assert compressed["ok"] and compressed["weight_bytes"]["ratio"] < 1 and (tmp_path / "q.onnx").exists()
    timed = json.loads(_ok(_run(gsrewrite, "bench", model, "q.onnx", "--runs", "3", "--json", cwd=tmp_path)).stdout)
    assert [m["model"] for m in timed["models"]] == [str(model), "q.onnx"] and timed["models"][0]["ratio_min"] == 1
    tuned = json.loads(_ok(_run(gsrewrite, "optimize", model, "t.onnx", "--tune", "--json", cwd=tmp_path)).stdout)
    assert tuned["tune"]["kept"] in tuned["tune"]["latency_ms"] and (tmp_path / "t.onnx").exists()
