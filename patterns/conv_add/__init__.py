"""The ``conv-add`` family: a per-channel constant Add after a Conv, folded into the Conv's bias."""
