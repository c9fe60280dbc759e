"""The ``conv-bn`` family (also the ``fuse-conv-bn`` simplify pass): BatchNormalization folded into a Conv."""
