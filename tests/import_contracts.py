"""import-linter contract types that also see the facades' lazy imports.

``gsrewrite/__init__.py`` (``_LAZY``) and ``gsrewrite/plugin_api.py`` (``_WHERE``) import their public names on first
use, through ``importlib``: the import graph import-linter builds from the source does not see them. Each contract
type here adds one import per lazy name to the graph before checking (``gsrewrite.plugin_api ->
gsrewrite.pipelines.pattern_pass`` for ``PatternPass``), so that every contract of pyproject.toml's
``[tool.importlinter]`` holds for what the facades import too. ``lint-imports`` loads this module from the working
directory (the repository root), which it puts on ``sys.path``.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from grimp import ImportGraph
from importlinter.contracts import acyclic_siblings, forbidden, independence, layers

#: facade module -> the attribute holding its lazy table (public name -> "module" or "module:attribute")
FACADES = {"gsrewrite": "_LAZY", "gsrewrite.plugin_api": "_WHERE"}


def lazy_imports() -> list[tuple[str, str, int | None, str]]:
    """(facade, module it imports, line number and text of the table entry) for every lazy name of every facade."""
    found = []
    for facade, table in FACADES.items():
        module = importlib.import_module(facade)
        lines = inspect.getsource(module).splitlines()
        for name, target in getattr(module, table).items():
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
