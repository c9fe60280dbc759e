"""The pattern registry: pattern files plus the named checks and computations they refer to.

Plugins fill it through the ``gsrewrite_register_patterns`` hook (the built-in patterns too). Names are
unique across everything registered: a second pattern, check or computation under a taken name raises
:class:`DuplicateNameError` naming both providers.

Pattern files given by path (:meth:`PatternRegistry.add_file`, :meth:`~PatternRegistry.add_directory`: what
``--pattern-file`` uses) are data and never run code. :meth:`~PatternRegistry.add_package` is for a plugin's
own installed package of pattern families (one folder per family: its pattern file and the Python only it
uses): it imports the package's modules and registers the ``CHECKS`` and ``COMPUTATIONS`` each one declares.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from gsrewrite.errors import DuplicateNameError, PatternError, UnknownPatternError, did_you_mean
from gsrewrite.patterns.contract import declared
from gsrewrite.patterns.pattern import Pattern, load_pattern
from gsrewrite.registry import ProviderScope

PatternFunction = Callable[[Any], Any]


class PatternRegistry(ProviderScope):
    """Registered patterns (in registration order), checks and computations."""

    def __init__(self) -> None:
        self._patterns: dict[str, Pattern] = {}
        self._providers: dict[str, str] = {}
        self.checks: dict[str, PatternFunction] = {}
        self.computes: dict[str, PatternFunction] = {}
        self._provider = ""  # nobody until a plugin's registration (ProviderScope.providing) says who

    # --- registration (the hook API) ----------------------------------------------------------------
    def add_pattern(self, pattern: Pattern, provider: str = "") -> None:
        self._claim(f"pattern {pattern.name!r}", pattern.name, provider)
        self._patterns[pattern.name] = pattern

    def add_file(self, path: str | Path, provider: str = "") -> list[Pattern]:
        """Load one pattern file and register its patterns."""
        patterns = load_pattern(path)
        for pattern in patterns:
            self.add_pattern(pattern, provider or self._provider or str(path))
        return patterns

    def add_directory(self, path: Any, provider: str = "") -> list[Pattern]:
        """Register every ``*.toml`` pattern file below ``path`` (sorted, recursively)."""
        root = Path(str(path))
        if not root.is_dir():
            raise PatternError(f"pattern directory not found: {root}")
        found: list[Pattern] = []
        for file in sorted(root.rglob("*.toml")):
            found.extend(self.add_file(file, provider))
        return found

    def add_package(self, package: str, provider: str = "") -> list[Pattern]:
        """Register an installed package of pattern families: the named functions of its modules
        (:meth:`add_functions`), then every pattern file below it (:meth:`add_directory`)."""
        self.add_functions(package, provider)
        return self.add_directory(Path(_module(package).__path__[0]), provider)

    def add_functions(self, package: str, provider: str = "") -> None:
        """Import ``package`` and every module below it (sorted) and register the checks and computations
        each declares in its ``CHECKS`` / ``COMPUTATIONS`` mappings (name -> function)."""
        for module in _walk(_module(package)):
            for name, check in getattr(module, "CHECKS", {}).items():
                self.add_check(name, check, provider)
            for name, compute in getattr(module, "COMPUTATIONS", {}).items():
                self.add_compute(name, compute, provider)

    def add_check(self, name: str, function: PatternFunction, provider: str = "") -> None:
        """A named check: ``function(match) -> str | None`` (a reason when the match must be rejected)."""
        self._claim(f"check {name!r}", f"check:{name}", provider)
        self.checks[name] = function

    def add_compute(self, name: str, function: PatternFunction, provider: str = "") -> None:
        """A named computation: ``function(match) -> value``; may raise CheckFailed to reject the match."""
        self._claim(f"computation {name!r}", f"compute:{name}", provider)
        self.computes[name] = function

    def _claim(self, what: str, key: str, provider: str) -> None:
        provider = provider or self._provider
        if key in self._providers:
            raise DuplicateNameError(
                f"{what} from {provider or 'unknown'} is already registered by {self._providers[key] or 'unknown'}"
            )
        self._providers[key] = provider

    # --- queries ------------------------------------------------------------------------------------
    @property
    def patterns(self) -> list[Pattern]:
        return list(self._patterns.values())

    def families(self) -> dict[str, list[Pattern]]:
        result: dict[str, list[Pattern]] = {}
        for pattern in self._patterns.values():
            result.setdefault(pattern.family, []).append(pattern)
        return result

    def provider(self, name: str) -> str:
        return self._providers.get(name, "")

    def get(self, name: str) -> Pattern:
        if name not in self._patterns:
            raise UnknownPatternError(f"unknown pattern {name!r}{did_you_mean(name, self._patterns)}; "
                                      "'gsrewrite patterns list' shows them all")
        return self._patterns[name]

    def select(self, names: Iterable[str]) -> list[Pattern]:
        """Patterns for ``--pattern`` values: ``all``, a family name, or a pattern name (in registry order)."""
        wanted: set[str] = set()
        families = self.families()
        for name in names:
            if name == "all":
                wanted.update(self._patterns)
            elif name in families:  # a family name selects all its patterns, even if one shares the name
                wanted.update(p.name for p in families[name])
            elif name in self._patterns:
                wanted.add(name)
            else:
                known = ["all", *self._patterns, *families]
                raise UnknownPatternError(f"unknown pattern or family {name!r}{did_you_mean(name, known)}; "
                                          "'gsrewrite patterns list' shows them all")
        return [p for p in self._patterns.values() if p.name in wanted]

    def verify(self, patterns: Iterable[Pattern]) -> None:
        """Every check and computation the patterns name must be registered, and every name it declares it
        reads (:func:`gsrewrite.patterns.contract.reads`) must be in the pattern's templates."""
        for pattern in patterns:
            for check in pattern.checks:
                if check not in self.checks:
                    raise PatternError(f"pattern {pattern.name!r} ({pattern.source}) uses unknown check {check!r}")
                _check_reads(pattern, f"check {check!r}", self.checks[check])
            for value, function in pattern.compute.items():
                if function not in self.computes:
                    raise PatternError(
                        f"pattern {pattern.name!r} ({pattern.source}) computes {value!r} with unknown "
                        f"function {function!r}"
                    )
                _check_reads(pattern, f"computation {function!r}", self.computes[function])


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise PatternError(f"pattern package {name!r} cannot be imported: {exc}") from exc


def _walk(package: ModuleType) -> Iterator[ModuleType]:
    """``package`` and every module below it, depth first, each folder's entries sorted by name."""
    yield package
    for info in sorted(pkgutil.iter_modules(getattr(package, "__path__", [])), key=lambda m: m.name):
        yield from _walk(_module(f"{package.__name__}.{info.name}"))


def _check_reads(pattern: Pattern, what: str, function: PatternFunction) -> None:
    """A declared name the pattern's templates lack is a load error naming the file and the pattern's line."""
    reads = declared(function)
    missing = sorted(reads.names - pattern.known_names) if reads is not None else []
    if missing:
        raise PatternError(f"{pattern.source}:{_line_of(pattern)}: pattern {pattern.name!r}: {what} reads "
                           f"{', '.join(map(repr, missing))}, which no template of the pattern has (renamed? "
                           "or declare it optional)")


def _line_of(pattern: Pattern) -> int:
    try:
        lines = Path(pattern.source).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return 1
    wanted = f'name = "{pattern.name}"'
    return next((i for i, line in enumerate(lines, start=1) if line.strip() == wanted), 1)
