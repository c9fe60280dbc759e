"""A third-party gsrewrite plugin for the tests (installed with pip into a fresh venv by the tests)."""
