"""The version of gsrewrite, in a module of its own: the modules that name it (the plugin records, ``--version``)
import it without importing the package's lazy public names (``gsrewrite/__init__.py``)."""

__version__ = "0.1.0"
