"""Compression strategies side by side with onnxruntime's quantizers, one run, on the same models and inputs.

    .venv/bin/python benchmarks/compress_vs_ort.py MODEL.onnx... [--runs 20] > benchmarks/results/compress.md

Per model: onnxruntime quantize_dynamic (QInt8, MatMul/Gemm) vs gsrewrite ``dynamic-int8`` on the original and
``optimize --compress dynamic-int8`` (fusions first); onnxruntime's MatMulNBitsQuantizer (int4, block 32,
symmetric) vs gsrewrite ``int4``; gsrewrite ``fp16``. Cosine / max abs: every output against the fp32 model on
validation's generated inputs (all size sets). Latency: min of ``--runs`` interleaved runs, 1 thread,
onnxruntime ORT_ENABLE_ALL, at validation's sample size.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx

import gsrewrite
from gsrewrite.pipelines import optimize
from gsrewrite.pipelines.bench import bench, bench_inputs
from gsrewrite.pipelines.compress import weight_bytes
from gsrewrite.validation import validate


def ort_dynamic(model: onnx.ModelProto, folder: str) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, target = Path(folder, "d_in.onnx"), Path(folder, "d_out.onnx")
    onnx.save(model, source)
    quantize_dynamic(source, target, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
                     extra_options={"MatMulConstBOnly": True})
    return onnx.load(target)


def ort_int4(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # the quantizer edits the model it is given
    quantizer = MatMulNBitsQuantizer(copy, block_size=32, is_symmetric=True)
    quantizer.process()
    return quantizer.model.model


def _makers(original: onnx.ModelProto, fused: onnx.ModelProto, folder: str
            ) -> list[tuple[str, Callable[[], onnx.ModelProto]]]:
    """The variants, each made only when asked for (``--only``)."""
    return [
        ("fp32 original", lambda: original),
        ("onnxruntime quantize_dynamic", lambda: ort_dynamic(original, folder)),
        ("gsrewrite dynamic-int8", lambda: gsrewrite.compress(original, "dynamic-int8", validate=False).model),
        ("gsrewrite optimize --compress dynamic-int8",
         lambda: gsrewrite.compress(fused, "dynamic-int8", validate=False).model),
        ("onnxruntime MatMulNBits int4 b32 sym", lambda: ort_int4(original)),
        ("gsrewrite int4 b32 sym", lambda: gsrewrite.compress(original, "int4", validate=False).model),
        ("gsrewrite int4 b32 sym, MatMul only (as onnxruntime)",
         lambda: gsrewrite.compress(original, "int4", validate=False, op_types=["MatMul"]).model),
        ("gsrewrite optimize --compress int4",
         lambda: gsrewrite.compress(fused, "int4", validate=False).model),
        ("gsrewrite fp16", lambda: gsrewrite.compress(original, "fp16", validate=False).model),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", action="append", default=[],
                        help="run only the variants whose label contains this text (repeatable; the original always)")
    args = parser.parse_args()
    print("| model | variant | file MiB | weights / fp32 | min cosine | max abs | latency ms (min) | vs original |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.models:
        original = onnx.load(path)
        with tempfile.TemporaryDirectory() as folder:
            fused = optimize(original, validate=False).model
            makers = _makers(original, fused, folder)
            variants = [(label, make()) for i, (label, make) in enumerate(makers)
                        if i == 0 or not args.only or any(text in label for text in args.only)]
        feed = bench_inputs(original)
        timed = bench(variants, runs=args.runs, inputs=feed)
        base_weights = weight_bytes(original)
        for (label, model), timing in zip(variants, timed.timings, strict=True):
            errors = validate(original, model, min_cosine=-1.0).outputs if model is not original else []
            cosine = min((e.cosine for e in errors if e.cosine is not None), default=1.0)
            max_abs = max((e.max_abs for e in errors if e.max_abs is not None), default=0.0)
            size = len(model.SerializeToString()) / 2**20
            print(f"| {Path(path).name} | {label} | {size:.1f} | {weight_bytes(model) / base_weights:.3f} | "
                  f"{cosine:.6f} | {max_abs:.3g} | {timing.min_ms:.2f} | "
                  f"{timing.min_ms / timed.timings[0].min_ms:.3f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
