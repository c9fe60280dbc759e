"""gsrewrite's built-in pattern families, one folder each (``patterns/<family>/``).

A folder holds the family's pattern file (``<family>.toml``: templates, data only) and, when data cannot say
everything, the Python only that family uses: modules declaring the named checks and computations its
templates refer to, in ``CHECKS`` / ``COMPUTATIONS`` mappings. ``_shared`` holds what several families use
(the proof machinery that runs side computations, and generic checks such as ``trailing_axes``).
The built-in plugin registers the whole package (``PatternRegistry.add_package``): a new family is a new
folder. The Python here imports only ``gsrewrite.plugin_api`` and ``_shared`` (import-linter contracts).
"""
