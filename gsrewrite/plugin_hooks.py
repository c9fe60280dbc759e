"""The typed way to call plugin hooks: one function per hook of :mod:`gsrewrite.hookspecs`.

Each function calls the implementations one plugin at a time, so that an exception raised inside a plugin
becomes a :class:`~gsrewrite.errors.PluginError` naming the plugin and the hook::

    plugin 'foo' (foo-pkg 1.2) failed in gsrewrite_register_patterns: ValueError: ...

Registration hooks call every implementation in registration order, built-ins first, so that a plugin reusing
a built-in name is the one blamed (registries that have a ``providing(label)`` context manager, like
:class:`~gsrewrite.registry.NamedRegistry`, learn which plugin adds each entry). Dispatch hooks keep
pluggy's ``firstresult`` order: the plugin registered last is asked first, and the first answer that is not
``None`` wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, NoReturn

from gsrewrite.errors import PluginError
from gsrewrite.plugin_manager import get_plugin_manager, one_line_error, plugin_label

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import click
    import onnx_graphsurgeon as gs
    from pluggy import HookImpl

    from gsrewrite.protocols import CompressionStrategy, GraphPass, OpCost, TensorType
    from gsrewrite.registry import NamedRegistry


def register_patterns(registry: Any) -> None:
    """Let every plugin add its pattern files and named checks/computations to ``registry``."""
    _register_all("gsrewrite_register_patterns", registry)


def register_compression_strategies(registry: NamedRegistry[CompressionStrategy]) -> None:
    """Let every plugin add its compression strategies to ``registry``."""
    _register_all("gsrewrite_register_compression_strategies", registry)


def register_passes(registry: NamedRegistry[GraphPass]) -> None:
    """Let every plugin add its graph passes to ``registry``."""
    _register_all("gsrewrite_register_passes", registry)


def infer_shape(node: gs.Node, ctx: Any) -> Sequence[TensorType] | None:
    """Output ``(dtype, shape)`` of ``node`` from the first plugin that knows its op, else ``None``."""
    return _first_result("gsrewrite_infer_shape", node, ctx)


def profile_op(node: gs.Node, ctx: Any) -> OpCost | None:
    """Cost of ``node`` from the first plugin that knows its op, else ``None``."""
    return _first_result("gsrewrite_profile_op", node, ctx)


def op_profiler() -> Callable[[gs.Node, Any], OpCost | None]:
    """:func:`profile_op` with the implementations looked up once: for a walk over many nodes (the plugins
    registered during the walk are not asked)."""
    impls = _dispatch_order("gsrewrite_profile_op")
    return lambda node, ctx: _first_answer(impls, "gsrewrite_profile_op", node, ctx)


_NODE_CONTEXT = ("node", "context")


def collect_cli_commands(disabled: Iterable[str] = ()) -> dict[str, click.Command]:
    """The commands of every plugin (the CLI's own, ``builtin:cli``, come first), by command name, except those of
    the plugins in ``disabled``.

    A plugin whose hook fails, or that adds a name an earlier plugin already uses, is left out with all its
    commands (a warning names it and says why): one broken plugin never takes the others' commands away.
    """
    skip = set(disabled)
    owners: dict[str, str] = {}
    commands: dict[str, click.Command] = {}
    for impl in _registration_order("gsrewrite_cli_commands"):  # a clash names the later plugin
        if impl.plugin_name in skip:
            continue
        label = plugin_label(impl.plugin_name)
        try:
            added = _commands_of(impl)
            taken = next((c.name for c in added if (c.name or "") in owners), None)
            if taken is not None:
                raise PluginError(f"{label} adds command {taken!r}, already provided by {owners[taken]}")
        except PluginError as exc:
            log.warning("%s; its commands are left out", exc)
            continue
        for command in added:
            owners[command.name or ""], commands[command.name or ""] = label, command
    return commands


def plugin_cli_commands(plugin_name: str) -> list[click.Command]:
    """The commands that plugin ``plugin_name`` adds (an empty list when it implements no such hook)."""
    impls = [
        impl for impl in _registration_order("gsrewrite_cli_commands") if impl.plugin_name == plugin_name
    ]
    return [command for impl in impls for command in _commands_of(impl)]


def _commands_of(impl: HookImpl) -> list[click.Command]:
    import click

    result = _call(impl, "gsrewrite_cli_commands", {})
    commands = list(result or ())
    bad = [c for c in commands if not isinstance(c, click.Command)]
    if bad:
        label = plugin_label(impl.plugin_name)
        raise PluginError(f"{label}: gsrewrite_cli_commands returned {bad[0]!r}, not a click command")
    return commands


def _registration_order(hook_name: str) -> list[HookImpl]:
    """Implementations in registration order: built-ins first, then installed plugins by name."""
    return getattr(get_plugin_manager().hook, hook_name).get_hookimpls()


def _dispatch_order(hook_name: str) -> list[HookImpl]:
    """Implementations in the order pluggy calls them: last registered (or ``tryfirst``) first."""
    return list(reversed(_registration_order(hook_name)))


def _register_all(hook_name: str, registry: Any) -> None:
    for impl in _registration_order(hook_name):
        with _providing(registry, impl.plugin_name):
            _call(impl, hook_name, {"registry": registry})


def _providing(registry: Any, plugin_name: str) -> AbstractContextManager[Any]:
    providing = getattr(registry, "providing", None)
    return providing(plugin_label(plugin_name)) if callable(providing) else nullcontext()


def _first_result(hook_name: str, node: gs.Node, ctx: Any) -> Any:
    return _first_answer(_dispatch_order(hook_name), hook_name, node, ctx)


def _first_answer(impls: Sequence[HookImpl], hook_name: str, node: gs.Node, ctx: Any) -> Any:
    kwargs = {"node": node, "context": ctx}
    for impl in impls:
        result = _call(impl, hook_name, kwargs)
        if result is not None:
            return result
    return None


def _call(impl: HookImpl, hook_name: str, kwargs: dict[str, Any]) -> Any:
    try:
        if impl.argnames == _NODE_CONTEXT:  # the dispatch hooks, called once per node: no generic unpacking
            return impl.function(kwargs["node"], kwargs["context"])
        return impl.function(*(kwargs[name] for name in impl.argnames))
    except Exception as exc:
        _raise_failed(impl, hook_name, kwargs.get("node"), exc)


def _raise_failed(impl: HookImpl, hook_name: str, node: Any, exc: Exception) -> NoReturn:
    where = hook_name
    if node is not None:
        where += f" for node {getattr(node, 'name', '?')!r} ({getattr(node, 'op', '?')})"
    label = plugin_label(impl.plugin_name)
    raise PluginError(f"{label} failed in {where}: {one_line_error(exc)}") from exc
