"""gsrewrite's built-in plugins: they use the same hooks as third-party plugins.

The plugin manager registers every module of :data:`BUILTIN_PLUGINS` directly (as ``builtin:<module>``),
not through entry points, so the built-ins stay loaded when plugin autoloading is disabled.
"""

#: Importable modules holding the built-in hook implementations.
BUILTIN_PLUGINS: list[str] = [
    "gsrewrite_builtins.patterns",
    "gsrewrite_builtins.profilers.linear",
    "gsrewrite_builtins.profilers.conv",
    "gsrewrite_builtins.profilers.elementwise",
    "gsrewrite_builtins.profilers.normalization",
    "gsrewrite_builtins.profilers.movement",
    "gsrewrite_builtins.profilers.contrib",
    "gsrewrite_builtins.profilers.control_flow",
    "gsrewrite_builtins.shape_handlers",
    "gsrewrite_builtins.passes",
    "gsrewrite_builtins.compression",
]
