"""``gsrewrite optimize``: simplify + every fusion for the target + validation, with the before/after table."""

from __future__ import annotations

from typing import Any

import click

from gsrewrite.cli._jobs import Job, io_options, run_jobs
from gsrewrite.cli._output import console, working
from gsrewrite.cli._rewrite_report import emit, print_explain, show
from gsrewrite.cli._validation_options import validation_options
from gsrewrite.cli.apply_cmd import device_option


@click.command()
@io_options
@click.option("--target", type=click.Choice(["onnx", "ort"]), default="ort", show_default=True,
              help="onnx: standard ONNX ops only; ort: also onnxruntime contrib ops.")
@device_option
@click.option("-p", "--pattern", "patterns", multiple=True, metavar="NAME",
              help="Restrict the fusions to these patterns or families (default: all).")
@click.option("--opset", type=click.IntRange(min=1), default=None, help="Convert the model to this opset first.")
@click.option("--no-simplify", is_flag=True, help="Skip the cleanup passes (fusions only).")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Compare the result with the original in onnxruntime (bisect and drop a guilty pattern).")
@click.option("--explain", is_flag=True, help="Also report, per pattern, the deepest near miss and why.")
@click.option("--in-place", is_flag=True, help="Allow OUTPUT to be the input model itself.")
@click.option("--tune", is_flag=True, help="Time the result with each matched fusion family on and off (and the input) "
              "in onnxruntime here, and keep the fastest.")
@click.option("--compress", "compress_with", default=None, metavar="STRATEGY",
              help="Then compress with this strategy (gsrewrite compress --list), validated against the input.")
@validation_options
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
def optimize(jobs_: list[Job], workers: int, target: str, device: str, patterns: tuple[str, ...],
             opset: int | None, no_simplify: bool, validate: bool, explain: bool, in_place: bool,
             tune: bool, compress_with: str | None, validation: dict[str, Any], as_json: bool, **io: Any) -> None:
    """Optimize MODEL for TARGET: cleanup passes, every fusion, validation; write OUTPUT.

    gsrewrite optimize in.onnx out.onnx (or -o out.onnx; no output: in.opt.onnx); several models: -o FOLDER.
    """
    settings = {"target": target, "device": device, "patterns": list(patterns) or ["all"], "opset": opset,
                "simplify": not no_simplify, "validation": validation if validate else None, "explain": explain}

    def one(job: Job) -> None:
        if tune:
            _optimize_and_tune(job, settings, in_place, as_json, io, compress_with)
            return
        if compress_with is not None:
            _optimize_and_compress(job, settings, compress_with, in_place, as_json, io)
            return
        _optimize_one(job, settings, in_place, as_json, io)

    run_jobs(jobs_, workers, one, as_json)


def _optimize_and_tune(job: Job, settings: dict[str, Any], in_place: bool, as_json: bool, io: dict[str, Any],
                       compress_with: str | None = None) -> None:
    """Optimize, time the candidates, keep the fastest, validate it against the input, (compress it,) write it."""
    from gsrewrite.errors import ValidationError
    from gsrewrite.model_io import check_output_path, load_model, save_model
    from gsrewrite.pipelines.optimize import optimize_model
    from gsrewrite.pipelines.tune import tune
    from gsrewrite.reporting import size_text

    external = io["external_data"] or None
    check_output_path(job.output, input_path=job.model, in_place=in_place, external_data=external)
    original = load_model(job.model)
    with working(f"optimizing {job.model}..."):
        result = optimize_model(original, source_path=job.model, **settings)
    with working(f"tuning {job.model}..."):
        tuned = tune(original, result.model, dict(result.counts), settings)
    if tuned.model is not result.model and tuned.model is not original and settings["validation"] is not None:
        from gsrewrite.validation import validate

        report = validate(original, tuned.model, **settings["validation"])
        if not report.ok:
            raise ValidationError(f"the tuned model ({tuned.kept}) disagrees with the input: {report.summary()}")
    final, compressed = tuned.model, None
    if compress_with is not None:
        from gsrewrite.pipelines.compress import compress

        validation = settings["validation"]
        with working(f"compressing {job.model} ({compress_with})..."):
            compressed = compress(tuned.model, compress_with, reference=original, validate=validation is not None,
                                  inputs=(validation or {}).get("inputs"),
                                  input_shapes=(validation or {}).get("input_shapes"), bench_runs=0)
        final = compressed.model
    size = save_model(final, job.output, input_path=job.model, in_place=in_place, external_data=external,
                      size_threshold=io["size_threshold"])
    if as_json:
        extra = {"tune": tuned.to_dict()} | ({"compress": compressed.to_dict()} if compressed is not None else {})
        emit(result.to_dict() | extra, job.output, None, size)
        return
    if io["verbosity"] >= 0:
        console().print(tuned.report(), markup=False, highlight=False, soft_wrap=True)
        if compressed is not None:
            console().print(compressed.report(), markup=False, highlight=False, soft_wrap=True)
    console().print(f"Wrote {job.output} ({size_text(size)})", markup=False, highlight=False, soft_wrap=True)


def _optimize_and_compress(job: Job, settings: dict[str, Any], strategy: str, in_place: bool, as_json: bool,
                           io: dict[str, Any]) -> None:
    """Fusions, then the strategy on the fused model, its outputs compared with the input model's."""
    from gsrewrite.model_io import check_output_path, load_model, save_model
    from gsrewrite.pipelines.compress import compress, strategies
    from gsrewrite.pipelines.optimize import optimize_model
    from gsrewrite.reporting import size_text

    strategies().get(strategy)  # an unknown name fails before any work
    external = io["external_data"] or None
    check_output_path(job.output, input_path=job.model, in_place=in_place, external_data=external)
    original = load_model(job.model)
    with working(f"optimizing {job.model}..."):
        result = optimize_model(original, source_path=job.model, **settings)
    validation = settings["validation"]
    with working(f"compressing {job.model} ({strategy})..."):
        compressed = compress(result.model, strategy, reference=original, validate=validation is not None,
                              inputs=(validation or {}).get("inputs"),
                              input_shapes=(validation or {}).get("input_shapes"), bench_runs=0)
    size = save_model(compressed.model, job.output, input_path=job.model, in_place=in_place,
                      external_data=external, size_threshold=io["size_threshold"])
    if as_json:
        emit(result.to_dict() | {"compress": compressed.to_dict()}, job.output, compressed.file_bytes[0], size)
        return
    show(result.report_blocks(verbose=io["verbosity"] > 0), None, None, io["verbosity"])  # the fusions
    if io["verbosity"] >= 0:
        console().print(compressed.report(), markup=False, highlight=False, soft_wrap=True)
    console().print(f"Wrote {job.output} ({size_text(size)})", markup=False, highlight=False, soft_wrap=True)


def _optimize_one(job: Job, settings: dict[str, Any], in_place: bool, as_json: bool, io: dict[str, Any]) -> None:
    from gsrewrite.cli._background_save import StagedSave
    from gsrewrite.model_io import check_output_path, load_model, stored_size
    from gsrewrite.pipelines.optimize import optimize_model

    external = io["external_data"] or None
    check_output_path(job.output, input_path=job.model, in_place=in_place, external_data=external)
    original = load_model(job.model)
    with StagedSave(job.output, input_path=job.model, in_place=in_place, external_data=external,
                    size_threshold=io["size_threshold"]) as staged:  # written while validation runs
        with working(f"optimizing {job.model}..."):
            result = optimize_model(original, source_path=job.model, on_serialized=staged.begin, **settings)
        size_after, size_before = staged.finish(result.model, result.serialized,
                                                lambda: stored_size(job.model, original))
    if as_json:
        emit(result.to_dict(), job.output, size_before, size_after)
        return
    show(result.report_blocks(verbose=io["verbosity"] > 0, size_before=size_before, size_after=size_after),
         job.output, size_after, io["verbosity"])
    if settings["explain"] and io["verbosity"] >= 0:
        print_explain(console(), result)
