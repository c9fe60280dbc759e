"""A registry of named entries, each remembered with the plugin that provided it.

Registration hooks (``gsrewrite_register_passes(registry)``, ...) receive a :class:`NamedRegistry`. The plugin
manager tells the registry which plugin is calling (:meth:`NamedRegistry.providing`), so a clash names both
plugins::

    registry = NamedRegistry[GraphPass]("pass")
    with registry.providing("plugin 'foo' (foo-pkg 1.2)"):
        registry.add(MyPass())          # registered under MyPass().name
    registry.get("my-pass")             # UsageError listing the known names if absent
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from gsrewrite.errors import DuplicateNameError, GsrewriteError, UsageError, did_you_mean

T = TypeVar("T")

#: The provider recorded for entries added outside any plugin (by a library caller or a test).
DIRECT_PROVIDER = "the caller"


class ProviderScope:
    """Who is registering right now: :meth:`providing` attributes what is added inside it to a plugin."""

    _provider: str = DIRECT_PROVIDER

    @contextmanager
    def providing(self, provider: str) -> Iterator[None]:
        """Attribute every entry added inside the ``with`` block to ``provider`` (a plugin label)."""
        previous, self._provider = self._provider, provider
        try:
            yield
        finally:
            self._provider = previous


class NamedRegistry(ProviderScope, Generic[T]):
    """Entries of one kind (compression strategies, passes, ...) by unique name.

    ``kind`` is the singular noun used in messages ("compression strategy"). Subclasses may set
    :attr:`unknown_error` to raise a more specific :class:`UsageError` subclass from :meth:`get`.
    """

    unknown_error: type[GsrewriteError] = UsageError

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._providers: dict[str, str] = {}

    def add(self, item: T, name: str | None = None) -> T:
        """Add ``item`` under ``name`` (default: ``item.name``) and return it.

        Raises :class:`DuplicateNameError` naming both providers when the name is taken.
        """
        key = name if name is not None else getattr(item, "name", None)
        if not isinstance(key, str) or not key:
            raise UsageError(f"{self.kind} {item!r} has no name: give it a 'name' attribute or pass name=")
        if key in self._entries:
            raise DuplicateNameError(
                f"{self.kind} {key!r} is provided by both {self._providers[key]} and {self._provider}"
            )
        self._entries[key] = item
        self._providers[key] = self._provider
        return item

    def get(self, name: str) -> T:
        """The entry called ``name``; an unknown name raises :attr:`unknown_error` listing the known ones."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "none registered"
            hint = did_you_mean(name, self.names())
            raise self.unknown_error(f"unknown {self.kind} {name!r}{hint}; known: {known}") from None

    def provider(self, name: str) -> str:
        """Who registered ``name`` (a plugin label, or :data:`DIRECT_PROVIDER`)."""
        self.get(name)
        return self._providers[name]

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs sorted by name."""
        return [(name, self._entries[name]) for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"NamedRegistry({self.kind!r}, {self.names()!r})"
