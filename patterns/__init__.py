"""Pattern files shipped with gsrewrite (data only: this package holds no code)."""
