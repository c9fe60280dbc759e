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


# --- the facades' lazy names (gsrewrite/__init__.py, gsrewrite/plugin_api.py) --------------------------------
def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _contract(name: str) -> object:
    """The contract whose name starts with ``name`` in pyproject.toml, as its (lazy-import-aware) class."""
    from importlinter import configuration

    configuration.configure()  # what lint-imports sets up before checking (the contracts' timer)
    sys.path.insert(0, str(ROOT))
    try:
        import import_contracts  # tests/import_contracts.py, as lint-imports loads it
    finally:
        sys.path.remove(str(ROOT))
    config = _config()
    types = dict(entry.split(": ") for entry in config["contract_types"])
    options = next(c for c in config["contracts"] if c["name"].startswith(name))
    cls = getattr(import_contracts, types[options["type"]].rpartition(".")[2])
    session = {k: v for k, v in config.items() if k != "contracts"}
    return cls(options["name"], session, {k: v for k, v in options.items() if k not in ("name", "type")})


def _graph() -> object:
    import grimp

    return grimp.build_graph(*_config()["root_packages"], exclude_type_checking_imports=True)


def test_every_contract_sees_the_lazy_names():
    config = _config()
    types = {entry.split(": ")[0] for entry in config["contract_types"]}
    assert {c["type"] for c in config["contracts"]} <= types


def test_a_lazy_name_of_the_plugin_facade_is_an_import_the_contracts_check(monkeypatch):
    """Naming a pipelines module in plugin_api's table breaks the facade contract, one of the CLI the layers,
    though nothing in the source imports them."""
    import gsrewrite.plugin_api as facade

    reach, layers = _contract("the plugin facade reaches"), _contract("gsrewrite layers")
    assert reach.check(_graph(), verbose=False).kept and layers.check(_graph(), verbose=False).kept
    monkeypatch.setitem(facade._LAZY, "RewriteResult", "gsrewrite.pipelines.apply")
    assert not reach.check(_graph(), verbose=False).kept
    monkeypatch.setitem(facade._LAZY, "console", "gsrewrite.cli._output")
    assert not layers.check(_graph(), verbose=False).kept


def test_the_three_facades_are_found_and_no_module_makes_lazy_names_another_way():
    """Every module ``__getattr__`` of gsrewrite, the built-in plugins and the pattern families comes from
    gsrewrite._lazy.facade, whose tables the contracts read; the three facades are among them."""
    import ast

    sys.path.insert(0, str(ROOT))
    try:
        import import_contracts
    finally:
        sys.path.remove(str(ROOT))
    by_hand = [name for name, path in import_contracts.module_files().items()
               if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                      for node in ast.parse(path.read_text(encoding="utf-8")).body)]
    assert by_hand == []
    assert {"gsrewrite", "gsrewrite.plugin_api", "gsrewrite.validation"} <= set(import_contracts.facades())
    lazy = {(facade, imported) for facade, imported, _, _ in import_contracts.lazy_imports()}
    assert ("gsrewrite.validation", "gsrewrite.validation.validator") in lazy


def test_a_lazy_name_of_the_validation_facade_is_an_import_the_contracts_check(monkeypatch):
    """validation/__init__'s table is under the layers too: naming a pipelines module there breaks them."""
    import gsrewrite.validation as facade

    layers = _contract("gsrewrite layers")
    assert layers.check(_graph(), verbose=False).kept
    monkeypatch.setitem(facade._LAZY, "RewriteResult", "gsrewrite.pipelines.apply")
    assert not layers.check(_graph(), verbose=False).kept
