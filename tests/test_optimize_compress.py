"""``optimize --compress STRATEGY`` takes the tolerance overrides ``compress`` takes (--min-cosine, --max-abs,
--min-agreement, --min-top1), through the console script users run and through the library's
``CompressOptions``. Before: ``optimize`` had no such option (exit 2) and a random-weight classifier, whose int4
logits keep their top-1 class in 83% of rows, could not be optimized and compressed in one command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import gsrewrite
from gsrewrite.errors import UsageError
from gsrewrite.testing import model_from_text, op_counts

GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _classifier() -> onnx.ModelProto:
    """An MLP with GELU written out (optimize fuses it) and 512 class scores from random weights: int4 keeps the
    logits' cosine (0.99) but changes the top-1 class of 17% of the 256 generated rows (near ties)."""
    rng = np.random.default_rng(0)
    return model_from_text("""
        g (float[64, 64] x) => (float[64, 512] logits) {
          m = MatMul (x, w)  d = Div (m, sqrt2)  e = Erf (d)  a = Add (e, one)  p = Mul (m, a)  h = Mul (p, half)
          logits = MatMul (h, w2)
        }""", initializers={"w": rng.standard_normal((64, 64)).astype(np.float32),
                            "w2": rng.standard_normal((64, 512)).astype(np.float32),
                            "sqrt2": np.array(1.4142135, np.float32), "one": np.array(1.0, np.float32),
                            "half": np.array(0.5, np.float32)})


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GSREWRITE_")}
    return subprocess.run([str(GSREWRITE), *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def _one_line(done: subprocess.CompletedProcess[str], code: int, output: Path, *words: str) -> None:
    assert done.returncode == code, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert not output.exists()


def test_optimize_compress_takes_the_tolerance_overrides(tmp_path: Path) -> None:
    onnx.save(_classifier(), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    # the strategy's own tolerance (top-1 >= 95%) refuses, as compress does
    _one_line(_cli(tmp_path, "optimize", "m.onnx", "out.onnx", "--compress", "int4"), 1, out, "top-1")
    # relaxed: the fused model with 4-bit weights
    done = _cli(tmp_path, "optimize", "m.onnx", "out.onnx", "--compress", "int4", "--min-top1", "0")
    assert done.returncode == 0, done.stderr
    assert op_counts(onnx.load(out)) == {"com.microsoft.MatMulNBits": 2, "com.microsoft.Gelu": 1}
    assert "top-1 >= 0%" in done.stdout
    out.unlink()
    # each override reaches the check: a cosine and a max abs error no int4 model meets refuse again
    _one_line(_cli(tmp_path, "optimize", "m.onnx", "out.onnx", "--compress", "int4", "--min-top1", "0",
                   "--min-cosine", "0.99999", "--max-abs", "1e-6"), 1, out, "cosine", "max abs")


def test_a_tolerance_without_compress_is_bad_input(tmp_path: Path) -> None:
    onnx.save(_classifier(), tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    _one_line(_cli(tmp_path, "optimize", "m.onnx", "out.onnx", "--min-top1", "0"), 2, out, "--min-top1",
              "--compress")


def test_compress_options_carry_the_tolerance_in_the_library() -> None:
    model = _classifier()
    with pytest.raises(gsrewrite.errors.OutOfToleranceError, match="top-1"):
        gsrewrite.optimize(model, compress="int4")
    result = gsrewrite.optimize(model, compress=gsrewrite.CompressOptions("int4", min_top1=0.0))
    assert result.compressed.tolerance.min_top1 == 0.0 and result.compressed.ok
    assert op_counts(result.model) == {"com.microsoft.MatMulNBits": 2, "com.microsoft.Gelu": 1}
    # given twice, or out of range: refused before any work
    with pytest.raises(UsageError, match="min_top1 is given twice"):
        gsrewrite.optimize(model, compress=gsrewrite.CompressOptions("int4", {"min_top1": 0.5}, min_top1=0.0))
    with pytest.raises(UsageError, match="cosine"):
        gsrewrite.optimize(model, compress=gsrewrite.CompressOptions("int4", min_cosine=2.0))


def test_int4_quantizes_an_lm_head_tied_to_the_embedding() -> None:
    """GPT-2 as the dynamo exporter writes it: the embedding's Gather and the LM head (MatMul of a Transpose) read
    one weight, the largest of the model. int4 quantizes it once: the head's MatMulNBits and the embedding's
    GatherBlockQuantized read the same codes and scales (before, the head got a 4-bit copy and the Gather kept the
    float table: SmolLM2's file was 2.3x the onnxruntime-genai builder's)."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((512, 64)).astype(np.float32)
    model = model_from_text("""
        g (int64[2, 8] ids) => (float[2, 8, 512] logits) {
          h = Gather (wte, ids)  m = MatMul (h, w)  t = Transpose <perm = [1, 0]> (wte)  logits = MatMul (m, t)
        }""", initializers={"wte": table, "w": rng.standard_normal((64, 64)).astype(np.float32) / 8})
    result = gsrewrite.optimize(model, compress=gsrewrite.CompressOptions("int4", min_top1=0.0))
    graph = result.model.graph
    counts = op_counts(result.model)
    assert counts == {"Reshape": 1, "com.microsoft.GatherBlockQuantized": 1, "com.microsoft.MatMulNBits": 2}, counts
    gather = next(n for n in graph.node if n.op_type == "GatherBlockQuantized")
    head = next(n for n in graph.node if n.op_type == "MatMulNBits" and n.output[0] == "logits")
    reshape = next(n for n in graph.node if n.op_type == "Reshape")
    assert reshape.input[0] == head.input[1] and gather.input[0] == reshape.output[0]
    assert gather.input[2:] == head.input[2:]  # the same scales (and zero points)
    assert not any(t.name == "wte" for t in graph.initializer)
    assert any("quantized once" in note for note in result.compressed.notes), result.compressed.notes
    assert result.compressed.ok


def test_dynamic_int8_after_the_tied_head_fusion_writes_weight_by_weight() -> None:
    """optimize fuses GPT-2's tied head into FusedMatMul(transB = 1) (matmul-transposed); dynamic-int8 then sees the
    head as the exporter wrote it (MatMul of a Transpose) and stays on its own weight-by-weight path instead of
    handing the whole model to onnxruntime's quantize_dynamic."""
    rng = np.random.default_rng(1)
    table = rng.standard_normal((2048, 160)).astype(np.float32)  # over the 1 MB a transposed copy may be folded
    model = model_from_text("""
        g (int64[2, 8] ids) => (float[2, 8, 2048] logits) {
          h = Gather (wte, ids)  m = MatMul (h, w)  t = Transpose <perm = [1, 0]> (wte)  logits = MatMul (m, t)
        }""", initializers={"wte": table, "w": rng.standard_normal((160, 160)).astype(np.float32) / 8})
    fused = gsrewrite.optimize(model, compress=None)
    assert op_counts(fused.model)["com.microsoft.FusedMatMul"] == 1
    result = gsrewrite.optimize(model, compress=gsrewrite.CompressOptions("dynamic-int8", min_top1=0.0))
    notes = result.compressed.notes
    assert "written one weight at a time" in notes[0] and "quantize_dynamic of" not in notes[0], notes
    counts = op_counts(result.model)
    assert counts["MatMulInteger"] == 1 and counts["Gather"] == 1 and "com.microsoft.FusedMatMul" not in counts
