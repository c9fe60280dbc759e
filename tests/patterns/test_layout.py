"""Each built-in pattern family lives in one folder: its pattern file and the Python only it uses, found by walking
``patterns/`` (no list to keep); what several families use is in ``patterns/_shared``. A pattern file given by
path never runs the Python next to it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gsrewrite.errors import DuplicateNameError
from gsrewrite.patterns import PatternRegistry, default_registry, load_pattern
from gsrewrite.testing import model_from_text

ROOT = Path(__file__).resolve().parents[2] / "patterns"
FOLDERS = sorted(p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def _functions(module: str) -> set[str]:
    registry = PatternRegistry()
    registry.add_functions(module)
    return set(registry.checks) | set(registry.computes)


def _used(folder: Path) -> set[str]:
    return {name for p in load_pattern(_pattern_file(folder)) for name in (*p.checks, *p.compute.values())}


def _pattern_file(folder: Path) -> Path:
    (toml,) = folder.glob("*.toml")
    return toml


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_family_folder_holds_one_pattern_file_named_after_the_family(folder: Path) -> None:
    assert len(list(folder.glob("*.toml"))) == 1, f"{folder.name}: one pattern file per family folder"
    families = {p.family for p in load_pattern(_pattern_file(folder))}
    assert families == {_pattern_file(folder).stem}
    assert folder.name == _pattern_file(folder).stem.replace("-", "_")


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_family_uses_only_its_own_python_and_the_shared_one(folder: Path) -> None:
    own = _functions(f"gsrewrite_patterns.{folder.name}") if (folder / "__init__.py").exists() else set()
    shared = _functions("gsrewrite_patterns._shared")
    used = _used(folder)
    assert used <= own | shared, f"{folder.name} uses {sorted(used - own - shared)} from another family"
    assert own <= used, f"{folder.name} registers {sorted(own - used)} that its patterns never use"


def test_shared_functions_serve_several_families() -> None:
    users: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for name in _used(folder):
            users.setdefault(name, set()).add(folder.name)
    for name in sorted(_functions("gsrewrite_patterns._shared")):
        assert len(users.get(name, ())) >= 2, f"{name} is used by {sorted(users.get(name, ()))}: move it there"


def test_the_builtin_registry_holds_every_folder_and_every_function() -> None:
    registry = default_registry()
    # By folder name: an installed (non-editable) package holds its own copy of patterns/ in site-packages.
    sources = {Path(p.source).resolve().parent.name for p in registry.patterns}
    assert {f.name for f in FOLDERS} <= sources
    expected = set().union(*(_functions(f"gsrewrite_patterns.{f.name}") for f in FOLDERS
                             if (f / "__init__.py").exists()), _functions("gsrewrite_patterns._shared"))
    assert expected <= set(registry.checks) | set(registry.computes)


def _family_package(root: Path, package: str, family: str, check: str) -> None:
    """A package with one family folder: a pattern file and a checks module registering ``check``."""
    folder = root / package / family.replace("-", "_")
    folder.mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (folder / "__init__.py").write_text("")
    (folder / f"{family}.toml").write_text(textwrap.dedent(f'''
        family = "{family}"
        [[pattern]]
        name = "{family}-relu"
        description = "Relu(Relu(x)) -> Relu(x)"
        checks = ["{check}"]
        match = "g (x) => (y) {{ r = Relu (x)  y = Relu (r) }}"
        replace = "g (x) => (y) {{ y = Relu (x) }}"
    '''))
    (folder / "checks.py").write_text(f"def {check}(match):\n    return None\n\n\nCHECKS = {{'{check}': {check}}}\n")


def test_a_new_family_is_one_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _family_package(tmp_path, "more_patterns", "double-relu", "always")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = PatternRegistry()
    (pattern,) = registry.add_package("more_patterns")
    assert pattern.name == "double-relu-relu" and registry.checks["always"].__module__.endswith(".checks")
    registry.verify([pattern])
    with pytest.raises(DuplicateNameError, match="check 'always'"):
        registry.add_functions("more_patterns")


def test_a_pattern_file_given_by_path_never_runs_the_python_beside_it(tmp_path: Path) -> None:
    """``--pattern-file`` of a family folder: the check it names is unknown (exit 2, one line); nothing ran."""
    _family_package(tmp_path, "pkg", "double-relu", "marker_check")
    marker = tmp_path / "ran"
    checks = tmp_path / "pkg" / "double_relu" / "checks.py"
    checks.write_text(f"open({str(marker)!r}, 'w').close()\n" + checks.read_text())
    model = model_from_text("g (float[2] x) => (float[2] y) { r = Relu (x)  y = Relu (r) }")
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    cli = str(Path(sys.executable).parent / "gsrewrite")
    toml = str(tmp_path / "pkg" / "double_relu" / "double-relu.toml")
    for args in (["apply", "--pattern-file", toml, "m.onnx", "-o", "out.onnx"], ["patterns", "check", toml]):
        done = subprocess.run([cli, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "marker_check" in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert not marker.exists() and not (tmp_path / "out.onnx").exists()
