"""The ``conv-affine`` family (also the ``fold-conv-affine`` simplify pass): per-channel Mul/Add folded into a Conv."""
