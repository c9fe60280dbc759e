"""import-linter contract types that also see the facades' lazy imports.

The lazy facades (``gsrewrite/__init__.py``, ``gsrewrite/plugin_api.py``, ``gsrewrite/validation/__init__.py``: every
module that calls :func:`gsrewrite._lazy.facade`) import their public names on first use, through ``importlib``: the
import graph import-linter builds from the source does not see them. Each contract type here adds one import per
lazy name to the graph before checking (``gsrewrite.plugin_api -> gsrewrite.pipelines.pattern_pass`` for
``PatternPass``), so that every contract of pyproject.toml's ``[tool.importlinter]`` holds for what the facades
import too. The facades are found in the source, not listed here: a new one is checked without a change to this
file, and ``tests/test_architecture.py`` refuses a module ``__getattr__`` made any other way. ``lint-imports``
loads this module from the working directory (the repository root), which it puts on ``sys.path``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any

from grimp import ImportGraph
from importlinter.contracts import acyclic_siblings, forbidden, independence, layers

#: the packages whose modules are searched for facades (pyproject.toml's root_packages)
ROOTS = ("gsrewrite", "gsrewrite_builtins", "gsrewrite_patterns")
#: how a facade makes its lazy names (gsrewrite/_lazy.py)
MARK = "_lazy.facade("


def module_files() -> dict[str, Path]:
    """Every module of the root packages: dotted name -> source file."""
    found = {}
    for root in ROOTS:
        spec = importlib.util.find_spec(root)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            base = Path(folder)
            for path in sorted(base.rglob("*.py")):
                parts = [root, *path.relative_to(base).with_suffix("").parts]
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def facades() -> list[str]:
    """The modules that make lazy names with gsrewrite._lazy.facade, found in their source."""
    return [name for name, path in module_files().items() if MARK in path.read_text(encoding="utf-8")]


def lazy_imports() -> list[tuple[str, str, int | None, str]]:
    """(facade, module it imports, line number and text of the table entry) for every lazy name of every facade."""
    from gsrewrite import _lazy

    found = []
    for facade in facades():
        module = importlib.import_module(facade)  # its table is registered on import
        lines = inspect.getsource(module).splitlines()
        for name, target in _lazy.TABLES[facade].items():
            imported = target.partition(":")[0]
            number = next((i for i, text in enumerate(lines, 1) if f'"{name}"' in text), None)
            found.append((facade, imported, number, lines[number - 1].strip() if number else f"{name}: {target}"))
    return found


def add_lazy_imports(graph: ImportGraph) -> None:
    for facade, imported, number, line in lazy_imports():
        graph.add_import(importer=facade, imported=imported, line_number=number,
                         line_contents=line if number is not None else None)


class _SeesLazyImports:
    def check(self, graph: ImportGraph, verbose: bool) -> Any:
        add_lazy_imports(graph)  # each contract gets its own copy of the graph
        return super().check(graph, verbose)  # type: ignore[misc]


class LayersContract(_SeesLazyImports, layers.LayersContract):
    """``layers``, seeing the facades' lazy imports."""


class ForbiddenContract(_SeesLazyImports, forbidden.ForbiddenContract):
    """``forbidden``, seeing the facades' lazy imports."""


class IndependenceContract(_SeesLazyImports, independence.IndependenceContract):
    """``independence``, seeing the facades' lazy imports."""


class AcyclicSiblingsContract(_SeesLazyImports, acyclic_siblings.AcyclicSiblingsContract):
    """``acyclic_siblings``, seeing the facades' lazy imports."""
