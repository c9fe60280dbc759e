"""Finding, loading and describing gsrewrite plugins.

:func:`get_plugin_manager` builds one :class:`pluggy.PluginManager` per process:

1. the hook specifications of :mod:`gsrewrite.hookspecs`;
2. the built-in plugins (``gsrewrite_builtins.BUILTIN_PLUGINS``), registered directly as ``builtin:<module>``
   so they stay when autoloading is off, and those a layer above handed over with :func:`register_builtin`
   (the CLI's own commands, ``builtin:cli``);
3. the entry points of group ``gsrewrite``, in name order, each imported on its own, unless
   ``GSREWRITE_DISABLE_PLUGIN_AUTOLOAD`` is set;
4. a check that no plugin implements a hook gsrewrite does not define (``pm.check_pending()``).

Plugins named by :func:`set_disabled` (the CLI's ``--disable-plugin``) or by ``GSREWRITE_DISABLE_PLUGINS=a,b``
are skipped. A plugin that fails to import or to validate is not fatal: it is recorded as failed (see
:func:`plugin_records`), logged as a warning that names it, and left out. Call hooks through the typed facade
in :mod:`gsrewrite.plugin_hooks`, not through ``pm.hook``.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pluggy

from gsrewrite import hookspecs
from gsrewrite._version import __version__
from gsrewrite.errors import UsageError

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "gsrewrite"
DISABLE_AUTOLOAD_ENV = "GSREWRITE_DISABLE_PLUGIN_AUTOLOAD"
DISABLE_PLUGINS_ENV = "GSREWRITE_DISABLE_PLUGINS"
BUILTIN_PREFIX = "builtin:"
_FALSE_WORDS = {"", "0", "false", "no", "off"}


@dataclass
class PluginRecord:
    """One plugin: where it comes from, the hooks it implements, and whether it is in use.

    ``status`` is ``"ok"``, ``"failed"`` (``error`` says why, on one line) or ``"disabled"``.
    """

    name: str
    distribution: str | None
    version: str | None
    builtin: bool = False
    status: str = "ok"
    error: str | None = None
    hooks: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How messages name the plugin: ``plugin 'foo' (foo-pkg 1.2)``."""
        origin = " ".join(p for p in (self.distribution, self.version) if p)
        return f"plugin {self.name!r}" + (f" ({origin})" if origin else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "builtin": self.builtin,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "hooks": list(self.hooks),
        }


class _PluginManager(pluggy.PluginManager):
    """Also takes undecorated functions named ``gsrewrite_*`` as hook implementations (as pytest does)."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        prefixed = name.startswith(f"{hookspecs.PROJECT_NAME}_")
        if opts is None and prefixed and inspect.isroutine(inspect.getattr_static(plugin, name, None)):
            return dict(_DEFAULT_IMPL_OPTS)
        return opts


def _default_impl_opts() -> dict[str, Any]:
    def probe() -> None: ...

    hookspecs.hookimpl(probe)
    return dict(getattr(probe, f"{hookspecs.PROJECT_NAME}_impl"))


_DEFAULT_IMPL_OPTS = _default_impl_opts()


@dataclass
class _State:
    pm: pluggy.PluginManager | None = None
    records: dict[str, PluginRecord] = field(default_factory=dict)
    disabled: frozenset[str] = frozenset()


_state = _State()
#: built-in plugins handed over by a layer above (:func:`register_builtin`): name -> plugin
_handed_over: dict[str, object] = {}


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, built on first use (see the module docstring)."""
    if _state.pm is None:
        loader = _Loader(disabled_plugin_names())
        loader.load_all(autoload=not autoload_disabled())
        _state.pm, _state.records = loader.pm, loader.records
    return _state.pm


def register_builtin(name: str, plugin: object) -> None:
    """Register ``plugin`` (an object with hook implementations) as the built-in plugin ``builtin:<name>`` of this
    process's plugin managers, before those of ``gsrewrite_builtins``: how a layer above this one adds built-ins
    (the CLI its commands) without the plugin manager importing it. A manager already built is rebuilt."""
    if _handed_over.get(name) is not plugin:
        _handed_over[name] = plugin
        _state.pm, _state.records = None, {}


def reset_plugin_manager() -> None:
    """Forget the plugin manager and the :func:`set_disabled` names (for tests); the next use rebuilds it."""
    global _state
    _state = _State()


def set_disabled(names: Iterable[str]) -> None:
    """Skip these plugins (in addition to ``GSREWRITE_DISABLE_PLUGINS``); rebuilds the manager if needed."""
    disabled = frozenset(names)
    if disabled != _state.disabled:
        _state.disabled = disabled
        _state.pm, _state.records = None, {}


def disabled_plugin_names() -> frozenset[str]:
    """Plugins to skip: those given to :func:`set_disabled` and those in ``GSREWRITE_DISABLE_PLUGINS``."""
    from_env = os.environ.get(DISABLE_PLUGINS_ENV, "").split(",")
    return _state.disabled | {name.strip() for name in from_env if name.strip()}


def autoload_disabled() -> bool:
    """Whether ``GSREWRITE_DISABLE_PLUGIN_AUTOLOAD`` is set to a true value (anything but 0/false/no/off)."""
    return os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() not in _FALSE_WORDS


def plugin_records() -> list[PluginRecord]:
    """Every plugin seen (built-in first, then by name), loaded or not, then any registered directly."""
    pm = get_plugin_manager()
    direct = [
        PluginRecord(name, None, None, hooks=_hook_names(pm, plugin))
        for name, plugin in pm.list_name_plugin()
        if name not in _state.records and plugin is not None
    ]
    return [*_state.records.values(), *direct]


def _hook_names(pm: pluggy.PluginManager, plugin: object) -> tuple[str, ...]:
    return tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))


def plugin_record(name: str) -> PluginRecord:
    """The record of plugin ``name``; an unknown name raises :class:`UsageError`."""
    get_plugin_manager()
    try:
        return _state.records[name]
    except KeyError:
        raise UsageError(f"unknown plugin {name!r} (known: {', '.join(_state.records)})") from None


def plugin_label(name: str) -> str:
    """How messages name plugin ``name``; also works for plugins registered directly on the manager."""
    get_plugin_manager()
    record = _state.records.get(name)
    return record.label if record is not None else f"plugin {name!r}"


def _given(plugin: object) -> object:
    return plugin


def one_line_error(exc: BaseException) -> str:
    """``Type: message`` with the message's lines joined, for plugin failure reports."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {'; '.join(lines)}" if lines else type(exc).__name__


class _Loader:
    """Builds a plugin manager and the records of what it did."""

    def __init__(self, disabled: frozenset[str]) -> None:
        self.pm = _PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.disabled = disabled
        self.records: dict[str, PluginRecord] = {}

    def load_all(self, autoload: bool) -> None:
        self.load_builtins()
        self.load_entry_points(autoload)
        self.pm.check_pending()  # each plugin was already checked on registration: this cannot fail
        for name in sorted(self.disabled - set(self.records)):
            log.warning("cannot disable plugin %r: no such plugin (known: %s)", name, ", ".join(self.records))

    def load_builtins(self) -> None:
        for name, plugin in _handed_over.items():
            self._add(PluginRecord(BUILTIN_PREFIX + name, "gsrewrite", __version__, True), partial(_given, plugin))
        try:
            modules = importlib.import_module("gsrewrite_builtins").BUILTIN_PLUGINS
        except (ImportError, AttributeError) as exc:
            self._fail(PluginRecord("builtin", "gsrewrite", __version__, builtin=True), exc)
            return
        for module in modules:
            name = BUILTIN_PREFIX + module.removeprefix("gsrewrite_builtins.")
            record = PluginRecord(name, "gsrewrite", __version__, True)
            self._add(record, partial(importlib.import_module, module))

    def load_entry_points(self, autoload: bool) -> None:
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
            dist = getattr(ep, "dist", None)
            record = PluginRecord(ep.name, dist and dist.name, dist and dist.version)
            if ep.name in self.records:
                log.warning(
                    "%s ignored: %s already uses that name", record.label, self.records[ep.name].label
                )
            elif not autoload:
                self.records[ep.name] = record
                record.status, record.error = "disabled", f"{DISABLE_AUTOLOAD_ENV} is set"
            else:
                self._add(record, ep.load)

    def _add(self, record: PluginRecord, load: Callable[[], object]) -> None:
        self.records[record.name] = record
        if record.name in self.disabled:
            record.status, record.error = "disabled", "disabled by --disable-plugin or " + DISABLE_PLUGINS_ENV
            return
        plugin = None
        try:
            plugin = load()
            self.pm.register(plugin, name=record.name)
            record.hooks = _hook_names(self.pm, plugin)
            self._validate(plugin)
        except (Exception, SystemExit) as exc:  # a broken plugin must not take gsrewrite down
            self._fail(record, exc, plugin)

    def _validate(self, plugin: object) -> None:
        for caller in self.pm.get_hookcallers(plugin) or ():
            impls = [impl for impl in caller.get_hookimpls() if impl.plugin is plugin]
            if not caller.has_spec() and any(not impl.optionalhook for impl in impls):
                raise pluggy.PluginValidationError(plugin, f"unknown hook {caller.name!r} (not in gsrewrite)")
            if any(impl.wrapper or impl.hookwrapper for impl in impls):
                raise pluggy.PluginValidationError(plugin, f"hook wrappers are not supported ({caller.name})")

    def _fail(self, record: PluginRecord, exc: BaseException, plugin: object = None) -> None:
        if plugin is not None and self.pm.is_registered(plugin):
            self.pm.unregister(plugin)
        self.records[record.name] = record
        record.status, record.error = "failed", one_line_error(exc)
        log.warning("%s failed to load and is skipped: %s", record.label, record.error)
