"""The ``matmul-add`` family (also the ``fuse-matmul-add`` simplify pass): 2-D MatMul + Add as Gemm."""
