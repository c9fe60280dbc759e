"""gsrewrite's built-in plugins: they use the same hooks as third-party plugins."""
