"""The ``linear-3d`` family: a projection flattened for a Gemm and restored, as one N-D MatMul (+ Add)."""
