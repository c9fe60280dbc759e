"""The ``skip-layernorm`` family: the residual Add before a LayerNormalization, per device."""
