"""The wheel must hold every package, the built-in plugins and the pattern families (files and Python)."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _declared() -> tuple[list[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return config["packages"], config["package-dir"]


def test_every_package_directory_is_listed_in_pyproject():
    packages, dirs = _declared()
    for top, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            name = ".".join([top, *relative.parts])
            assert name in packages, f"{name} ({init.parent}) is missing from [tool.setuptools] packages"


def test_installed_pattern_files_match_the_repository():
    root = Path(str(resources.files("gsrewrite_patterns")))
    installed = {p.relative_to(root).as_posix() for p in root.rglob("*.toml")}
    in_repo = {p.relative_to(ROOT / "patterns").as_posix() for p in (ROOT / "patterns").rglob("*.toml")}
    assert in_repo and installed == in_repo


def test_every_folder_of_pattern_python_is_a_package():
    """Python in a pattern folder without ``__init__.py`` would neither ship nor be registered."""
    for source in (ROOT / "patterns").rglob("*.py"):
        assert (source.parent / "__init__.py").is_file(), f"{source.parent} holds Python but no __init__.py"


def test_builtin_plugins_are_importable_from_the_install():
    import gsrewrite_builtins

    for module in gsrewrite_builtins.BUILTIN_PLUGINS:
        __import__(module)
