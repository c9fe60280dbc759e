"""Every hook a gsrewrite plugin can implement, in one place.

A plugin is a module or object with functions decorated by :data:`hookimpl` whose names are the hook
names below. Third-party packages expose it through the ``gsrewrite`` entry-point group::

    [project.entry-points.gsrewrite]
    myplugin = "my_package.gsrewrite_plugin"

The built-in patterns, profilers, shape handlers and compression strategies are registered through these
very hooks (see ``plugins/gsrewrite_builtins``).

Two shapes of hook:

* **registration hooks** receive a registry and add named entries to it; every implementation is called;
  a registry raises :class:`gsrewrite.errors.DuplicateNameError` on a name it already holds.
* **dispatch hooks** are ``firstresult``: implementations are tried (last registered first) until one returns
  something other than ``None``; ``None`` means "not mine, ask the next plugin".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click
    import onnx_graphsurgeon as gs

    from gsrewrite.patterns.registry import PatternRegistry

PROJECT_NAME = "gsrewrite"
#: Decorator for hook specifications (used only in this module).
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Decorator for plugin implementations: ``@hookimpl def gsrewrite_register_patterns(registry): ...``
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def gsrewrite_register_patterns(registry: PatternRegistry) -> None:
    """Register pattern files and the named Python checks/computations that pattern files refer to.

    Use ``registry.add_directory(path)`` / ``registry.add_file(path)`` for pattern files, and
    ``registry.add_check(name, fn)`` / ``registry.add_compute(name, fn)`` for the named functions. The
    return value is ignored.
    """


@hookspec
def gsrewrite_register_compression_strategies(registry: Any) -> None:
    """Register compression strategies (fp16, int8/int4 weight quantization, ...) by name.

    ``registry.add(strategy)`` takes an object that satisfies ``gsrewrite.protocols.CompressionStrategy``.
    The return value is ignored.
    """


@hookspec
def gsrewrite_register_passes(registry: Any) -> None:
    """Register graph passes (the ``simplify`` passes: folding, elimination, ...) by name.

    ``registry.add(pass_)`` takes an object that satisfies ``gsrewrite.protocols.GraphPass``. The return
    value is ignored.
    """


@hookspec(firstresult=True)
def gsrewrite_infer_shape(node: gs.Node, context: Any) -> Any | None:
    """Infer output shapes and dtypes of ``node`` (a custom op the standard inference does not know).

    Return one ``(dtype, shape)`` per node output, or ``None`` when this plugin does not handle the node.
    """


@hookspec(firstresult=True)
def gsrewrite_profile_op(node: gs.Node, context: Any) -> Any | None:
    """Return the cost (MACs, parameters, memory) of ``node``, or ``None`` when this plugin does not know it."""


@hookspec
def gsrewrite_cli_commands() -> list[click.Command] | None:
    """Return extra click commands to add to the ``gsrewrite`` CLI, or ``None`` for none.

    A command whose name is already taken (by gsrewrite or another plugin) is refused with an error that
    names the plugin.
    """
