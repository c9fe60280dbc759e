"""Pattern files and the pattern registry.

``load_pattern(path)`` reads a pattern file (no code is executed); ``default_registry()`` holds every
pattern, check and computation registered by plugins (the built-in ones included).
"""

from __future__ import annotations

from gsrewrite.patterns.pattern import Pattern, Variant, load_pattern
from gsrewrite.patterns.registry import PatternRegistry

__all__ = ["Pattern", "PatternRegistry", "Variant", "default_registry", "load_pattern"]


def default_registry() -> PatternRegistry:
    """A registry filled through the ``gsrewrite_register_patterns`` hook of every loaded plugin."""
    from gsrewrite import plugin_hooks

    registry = PatternRegistry()
    plugin_hooks.register_patterns(registry)
    return registry
