"""The one mechanism of gsrewrite's lazy facades: public names imported on first use, by name.

A facade (``gsrewrite``, ``gsrewrite.plugin_api``, ``gsrewrite.validation``) holds a table, public name ->
``"module"`` or ``"module:attribute"`` (the facade renames it), and gets its module ``__getattr__`` and
``__dir__`` from :func:`facade`; importing it imports none of those modules (``gsrewrite --help`` must not import
onnxruntime or the engine). Each call records the table in :data:`TABLES`, which the import contracts read
(``tests/import_contracts.py``): every lazy name is an import the contracts check, as if it were written out.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

#: facade module -> its table (public name -> "module" or "module:attribute")
TABLES: dict[str, Mapping[str, str]] = {}


def facade(module: str, table: Mapping[str, str], public: list[str], *,
           keep: bool = True) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module named ``module``: a name of ``table`` is imported on first
    use (and, with ``keep``, set on the module, so the next access does not come here); ``public`` is what
    ``dir()`` lists."""
    TABLES[module] = table

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, attribute = target.partition(":")
        value = getattr(importlib.import_module(where), attribute or name)
        if keep:
            setattr(sys.modules[module], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(public)

    return __getattr__, __dir__
