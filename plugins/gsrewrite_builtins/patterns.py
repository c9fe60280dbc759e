"""Built-in patterns: the families of ``patterns/`` (package ``gsrewrite_patterns``), one folder each.

Each family folder holds its pattern file and the named checks and computations only it uses; what several
families use lives in ``patterns/_shared``. Nothing here lists them: the registry walks the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gsrewrite.plugin_api import hookimpl

if TYPE_CHECKING:
    from gsrewrite.plugin_api import PatternRegistry

#: The package of the built-in pattern families.
PACKAGE = "gsrewrite_patterns"


@hookimpl
def gsrewrite_register_patterns(registry: PatternRegistry) -> None:
    registry.add_package(PACKAGE)
