"""The contract between a pattern file and the Python it names: a check or computation declares the template
names it reads, and the declaration is verified when a pattern using it loads.

    @reads("q", "k", "mask", optional=("bias",))
    def my_check(match): ...

``names``: every pattern that uses the function must have each of them in some template (tensors, node labels,
captures, computed values); a renamed tensor is then a load error naming the file, not a check that silently
passes. ``optional``: names some of the patterns lack (the accessors return None there). While a declared
function runs, reading a name it did not declare raises :class:`~gsrewrite.engine.match.UnknownNameError` when
``GSREWRITE_STRICT_READS=1`` (the test suite sets it), so declarations stay true.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
STRICT_ENV = "GSREWRITE_STRICT_READS"


@dataclass(frozen=True)
class Reads:
    """Names a check or computation reads: ``names`` in every pattern using it, ``optional`` in some."""

    names: frozenset[str]
    optional: frozenset[str] = frozenset()

    @property
    def all(self) -> frozenset[str]:
        return self.names | self.optional


def reads(*names: str, optional: Iterable[str] = ()) -> Callable[[F], F]:
    """Declare the template names the decorated check or computation reads."""
    declared = Reads(frozenset(names), frozenset(optional))

    def mark(function: F) -> F:
        function.__gsrewrite_reads__ = declared  # type: ignore[attr-defined]
        return function

    return mark


def declared(function: Any) -> Reads | None:
    """The names ``function`` declared with :func:`reads`, or None."""
    found = getattr(function, "__gsrewrite_reads__", None)
    return found if isinstance(found, Reads) else None


def strict() -> bool:
    return os.environ.get(STRICT_ENV) == "1"
