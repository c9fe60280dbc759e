"""The pass registry: every simplify pass registered by a plugin (the built-ins too), in pipeline order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gsrewrite.errors import UsageError
from gsrewrite.protocols import GraphPass
from gsrewrite.registry import NamedRegistry


class PassRegistry(NamedRegistry[GraphPass]):
    """Passes by name; :meth:`pipeline` gives them in registration order (built-ins first, in the order
    they are meant to run), which is the order ``simplify`` runs them in."""

    def __init__(self) -> None:
        super().__init__("pass")

    def add(self, item: GraphPass, name: str | None = None) -> GraphPass:
        """Register ``item`` (anything with ``name``, ``description`` and ``run(graph)``)."""
        if not isinstance(item, GraphPass):
            raise UsageError(f"{item!r} is not a graph pass: it needs 'name', 'description' and 'run(graph)'")
        return super().add(item, name)

    def pipeline(self) -> list[GraphPass]:
        """Every registered pass in the order it runs."""
        return [self.get(name) for name in self._entries]

    def select(self, only: Sequence[str] | None = None, skip: Iterable[str] = (),
               extra: Iterable[str] = ()) -> list[GraphPass]:
        """The passes to run, in pipeline order: ``only`` (when given) or every default pass plus ``extra``,
        minus ``skip``. Unknown names raise :class:`UsageError` listing the known ones."""
        wanted = set(only) if only else {n for n, p in self._entries.items() if is_default(p)}
        wanted |= set(extra)
        skipped = set(skip)
        for name in wanted | skipped:
            self.get(name)
        return [p for n, p in self._entries.items() if n in wanted and n not in skipped]


def is_default(pass_: Any) -> bool:
    """True unless the pass declares ``default = False`` (it then runs only when asked for)."""
    return bool(getattr(pass_, "default", True))


def default_pass_registry() -> PassRegistry:
    """A registry filled by every enabled plugin's ``gsrewrite_register_passes`` hook."""
    from gsrewrite.plugin_hooks import register_passes

    registry = PassRegistry()
    register_passes(registry)
    return registry
