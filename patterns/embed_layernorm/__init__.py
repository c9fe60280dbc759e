"""The ``embed-layernorm`` family: embedding lookups + LayerNorm as EmbedLayerNormalization."""
