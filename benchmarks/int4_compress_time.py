"""What int4's scale search costs and what accuracy_level 4 buys, per model (issue 33, items 1 and 4).

    .venv/bin/python benchmarks/int4_compress_time.py MODEL.onnx [MODEL.onnx ...] [--rounds 3] [--runs 10] \
        >> benchmarks/results/int4_quality.md

Per model: ``gsrewrite.compress(Source.mapped(MODEL), "int4", validate=False, bench_runs=0, **options)`` for each
quantizer of :data:`METHODS`, the methods interleaved round after round (``--rounds``), min and max wall seconds of
the call (the reading of the weights, the activation probe and the quantization; no validation, no latency). Then,
for a decoder with a KV cache, the default result's MatMulNBits at accuracy_level 0 and 4 timed side by side as
compress times them (``bench_phases``: a decode step over a past of 128, a prefill of 128 tokens; 1 thread,
ORT_ENABLE_ALL, ``--runs`` interleaved runs, min and median).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markdown import table

log = logging.getLogger("int4_compress_time")
#: label -> compress options
METHODS: dict[str, dict[str, Any]] = {
    "rtn, symmetric (before; the builder's numerics)": {"method": "rtn", "symmetric": True},
    "search, no activations": {"activations": False},
    "default: search, activation-weighted": {},
}


def compress_once(path: str, options: dict[str, Any]) -> tuple[float, Any]:
    from gsrewrite.pipelines.compress import compress
    from gsrewrite.pipelines.options import Source

    start = time.perf_counter()
    result = compress(Source.mapped(path), "int4", validate=False, bench_runs=0, **options)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from gsrewrite.model_io.weights import weights_from
    from gsrewrite.pipelines.bench import bench_phases
    from gsrewrite.pipelines.compress import weight_bytes, with_accuracy_level
    from gsrewrite.pipelines.options import Source
    from gsrewrite.validation.phases import decoder_phases

    print("## Compress time and accuracy_level\n")
    for path in args.models:
        source = Source.mapped(path)
        seconds: dict[str, list[float]] = {label: [] for label in METHODS}
        kept: Any = None
        for round_ in range(args.rounds):
            for label, options in METHODS.items():
                log.info("%s: %s, round %d", Path(path).name, label, round_ + 1)
                took, result = compress_once(path, options)
                seconds[label].append(took)
                if not options and kept is None:
                    kept = result
                del result
        print(f"### {Path(path).name} ({weight_bytes(source.model) / 1e6:.0f} MB of weights)\n")
        print(table(("int4", "compress min (s)", "max (s)"),
                    [(label, f"{min(t):.1f}", f"{max(t):.1f}") for label, t in seconds.items()]))
        phases = decoder_phases(source.model)
        if phases is None or kept is None:
            print()
            continue
        with weights_from(kept.weights_dir or source.weights_dir):
            variants = [(f"accuracy_level {level}", with_accuracy_level(kept.model, level)) for level in (0, 4)]
            results = bench_phases(variants, phases, runs=args.runs, threads=1)
        rows = []
        for phase, result in zip(phases, results, strict=True):
            for timing in result.timings:
                rows.append((phase.name, timing.model, f"{timing.min_ms:.2f}",
                             f"{statistics.median(timing.times) * 1000:.2f}"))
        print()
        print(table(("phase", "MatMulNBits", "min ms", "median ms"), rows))
        print()


if __name__ == "__main__":
    main()
