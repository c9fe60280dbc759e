"""The ``mha`` family: attention fusions, KV caches, grouped heads, QKV packing and masks as indices."""
