"""``gsrewrite compress``: a compression strategy, validated against the uncompressed model, with a report."""

from __future__ import annotations

from typing import Any

import click

from gsrewrite.cli._jobs import Job, io_options, run_jobs, staged_save
from gsrewrite.cli._options import criterion_options, inputs_option, json_option, report_option, validate_option
from gsrewrite.cli._output import console, table
from gsrewrite.cli._report import check_report, emit, show, write_html, wrote_report


def _list(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from gsrewrite.pipelines.compress import strategies, tolerance_of
    from gsrewrite.validation.criteria import Criterion

    registry = strategies()
    rows = []
    for name in registry.names():
        strategy = registry.get(name)
        rows.append((name, getattr(strategy, "description", ""), Criterion.of(tolerance_of(strategy)).describe(),
                     ", ".join(getattr(strategy, "options", ()))))
    console().print(table("Compression strategies", ["name", "what", "tolerance", "options"], rows))
    ctx.exit(0)


@click.command()
@click.option("--list", "list_", is_flag=True, expose_value=False, is_eager=True, callback=_list,
              help="List the compression strategies (built-in and plugins') and exit.")
@io_options
@click.option("-s", "--strategy", required=True, metavar="NAME", help="fp16, bf16, dynamic-int8, static-int8, int8, "
              "int4, or a plugin's (--list).")
@click.option("--symmetric/--asymmetric", default=None, help="int8/int4/dynamic-int8: signed codes (zero point 0) or "
              "unsigned with a zero point (default: symmetric; int4's tied LM head: zero points).")
@click.option("--granularity", type=click.Choice(["tensor", "channel", "block"]), default=None,
              help="int8/int4: one scale per tensor, per output channel, or per block.")
@click.option("--block-size", type=click.IntRange(16, 256), default=None, help="int8/int4 blocks (power of 2).")
@click.option("--method", type=click.Choice(["rtn", "search"]), default=None,
              help="int8/int4 quantizer: round to nearest, or a k-quant style scale search per block (int4's "
              "default).")
@click.option("--activations/--no-activations", default=None,
              help="int8/int4 --method search: weight each element by its input channel's squared activations, "
              "measured on --calibration inputs (default: on, generated inputs).")
@click.option("--head-bits", type=click.Choice(["4", "8"]), default=None,
              help="int4: bits of a tied LM head and its embedding table (default: the strategy's).")
@click.option("--head-symmetric/--head-asymmetric", default=None,
              help="int8/int4: the tied LM head and its table without / with zero points (default: as "
              "--symmetric/--asymmetric).")
@click.option("--accuracy-level", type=click.IntRange(0, 4), default=None,
              help="int8/int4 MatMulNBits accuracy_level (4: int8 activations; default: the faster of 0 and 4, "
              "measured).")
@click.option("--target", type=click.Choice(["ort", "onnx"]), default=None,
              help="int8/int4: com.microsoft MatMulNBits (ort) or standard DequantizeLinear (onnx).")
@click.option("--allow-opset-upgrade", is_flag=True, default=None,
              help="int4/blocked --target onnx: convert the model to opset 21 when it is older.")
@click.option("--calibration", default=None, metavar="FILE.npz|DIR",
              help="static-int8, int8/int4 --method search: calibration inputs (default: generated).")
@click.option("--keep-io-types/--no-keep-io-types", default=None, help="fp16: keep inputs/outputs float32.")
@click.option("--exclude", multiple=True, metavar="NODE", help="Leave this node uncompressed (repeatable).")
@click.option("--op-types", default=None, metavar="A,B", help="int8/int4/dynamic/static-int8: op types to quantize.")
@criterion_options("compress")
@validate_option("Compare outputs with the uncompressed model (and bisect nodes that break the tolerance).")
@inputs_option
@click.option("--bench-runs", type=click.IntRange(min=0), default=10, show_default=True,
              help="Latency before/after: interleaved onnxruntime runs (0: skip).")
@click.option("--allow-slower", is_flag=True, help="Write the result even when it was measured more than 1.1x slower "
              "than MODEL (by default nothing is written then, exit code 1).")
@report_option
@json_option
def compress(jobs_: list[Job], workers: int, strategy: str, inputs: str | None, validate: bool, bench_runs: int,
             allow_slower: bool, criterion: dict[str, Any], report: str | None, as_json: bool, **kwargs: Any) -> None:
    """Compress MODEL with a strategy and write it to OUTPUT (default MODEL_STEM.opt.onnx), after checking its
    outputs against the uncompressed model with the strategy's tolerance (cosine similarity of float outputs,
    agreement of integer/bool outputs, top-1 of class scores; NaN/inf where the original is finite fails).

    Exit code 1, nothing written: the result misses the tolerance, the strategy changed no weight, or the result
    was measured more than 1.1x slower than MODEL (without --allow-slower).

    gsrewrite compress model.onnx small.onnx --strategy int4 --block-size 32"""
    io = {k: kwargs.pop(k) for k in ("force", "external_data", "size_threshold", "verbosity")}
    options = _strategy_options(kwargs)
    check_report(report, jobs_, read=[("--inputs", inputs), ("--calibration", options.get("calibration"))])

    def one(job: Job) -> None:
        from gsrewrite.cli._output import working
        from gsrewrite.pipelines.compress import compress as run
        from gsrewrite.pipelines.options import Source

        with staged_save(job, io) as output:
            with working(f"compressing {job.model}..."):  # the weights stay in their files until the save
                result = run(Source.mapped(job.model), strategy, validate=validate, inputs=inputs,
                             bench_runs=bench_runs, allow_slower=allow_slower, **criterion, **options)
            size = output.save(result.model, weights_dir=result.weights_dir)
        page = write_html(result, report, model=job.model, output=job.output, command="compress",
                          size_before=result.file_bytes[0], size_after=size)
        if as_json:
            emit(result.to_dict(), job.output, result.file_bytes[0], size, report)
            return
        show(result.report_blocks(), job.output, size, io["verbosity"])
        wrote_report(report, page)

    run_jobs(jobs_, workers, one, as_json)


def _strategy_options(values: dict[str, Any]) -> dict[str, Any]:
    """The options the user gave (unset ones are not passed: each strategy has its own defaults)."""
    options: dict[str, Any] = {}
    for key in ("symmetric", "granularity", "block_size", "method", "activations", "accuracy_level", "head_bits",
                "head_symmetric", "target", "allow_opset_upgrade", "calibration", "keep_io_types"):
        if values.get(key) is not None:
            options[key] = values[key]
    if values.get("exclude"):
        options["exclude"] = list(values["exclude"])
    if values.get("op_types"):
        options["op_types"] = [t.strip() for t in values["op_types"].split(",") if t.strip()]
    return options
