"""matmul-transposed: MatMul(x, Transpose(W)) of a constant 2-D W -> FusedMatMul(transB = 1), onnxruntime only
(the tied LM head of the dynamo GPT-2 export: the table is no longer transposed on every run)."""

from __future__ import annotations

import numpy as np

from gsrewrite.testing import assert_no_rewrite, assert_rewrite, model_from_text

RNG = np.random.default_rng(7)
# [vocabulary, hidden], as an embedding table is stored; over the 1 MB a transposed copy may be folded into
TABLE = RNG.normal(size=(2048, 160)).astype(np.float32)


def _tied_head(perm: str = "[1, 0]") -> object:
    return model_from_text(f"""
    g (int64[2, 3] ids) => (float[2, 3, 2048] logits) {{
        h = Gather (table, ids)
        t = Transpose <perm = {perm}> (table)
        logits = MatMul (h, t)
    }}""", initializers={"table": TABLE})


def test_a_tied_head_reads_the_table_as_it_is() -> None:
    result = assert_rewrite(_tied_head(), ["matmul-transposed"], {"matmul-transposed": 1},
                            produces={"com.microsoft.FusedMatMul": 1, "Gather": 1}, absent=["Transpose", "MatMul"])
    fused = next(n for n in result.model.graph.node if n.op_type == "FusedMatMul")
    assert {a.name: a.i for a in fused.attribute if a.name.startswith("trans")} == {"transA": 0, "transB": 1}
    assert len(result.model.graph.initializer) == 1  # one table, not a transposed copy beside it


def test_only_for_onnxruntime_and_only_a_2d_constant_transposed_as_a_whole() -> None:
    assert_no_rewrite(_tied_head(), ["matmul-transposed"], target="onnx")
    computed = model_from_text("""
    g (float[4, 160] x, float[2048, 160] w) => (float[4, 2048] y) {
        t = Transpose <perm = [1, 0]> (w)
        y = MatMul (x, t)
    }""")
    assert_no_rewrite(computed, ["matmul-transposed"])
    batched = model_from_text("""
    g (float[2, 4, 160] x) => (float[2, 4, 1024] y) {
        t = Transpose <perm = [0, 2, 1]> (w)
        y = MatMul (x, t)
    }""", initializers={"w": RNG.normal(size=(2, 1024, 160)).astype(np.float32)})
    assert_no_rewrite(batched, ["matmul-transposed"])
