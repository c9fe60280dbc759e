"""The ``rotary`` family: x * cos + rotate_half(x) * sin as RotaryEmbedding."""
