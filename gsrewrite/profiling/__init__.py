"""Shapes, costs and memory of a model: the library side of ``gsrewrite shapes``, ``profile`` and ``memory``."""
