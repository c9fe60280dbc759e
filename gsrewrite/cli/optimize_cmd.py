"""``gsrewrite optimize``: simplify + every fusion for the target + validation (then ``--tune``, ``--compress``),
with the before/after table."""

from __future__ import annotations

from typing import Any

import click

from gsrewrite.cli._jobs import Job, io_options, run_jobs, staged_save
from gsrewrite.cli._options import (
    contract_option,
    criterion_options,
    device_option,
    explain_option,
    in_place_option,
    json_option,
    no_simplify_option,
    opset_option,
    patterns_option,
    report_option,
    target_option,
    validate_option,
    validation_options,
)
from gsrewrite.cli._output import working
from gsrewrite.cli._report import check_report, show_result


@click.command()
@io_options
@target_option
@device_option
@patterns_option
@opset_option
@contract_option
@no_simplify_option
@validate_option("Compare the result with the original in onnxruntime (bisect and drop a guilty pattern).")
@explain_option
@in_place_option
@click.option("--tune", is_flag=True, help="Time the result with each matched fusion family on and off (and the input) "
              "in onnxruntime here, and keep the fastest.")
@click.option("--compress", "compress_with", default=None, metavar="STRATEGY",
              help="Then compress with this strategy (gsrewrite compress --list), validated against the input with "
                   "the strategy's tolerance (or the values given below).")
@criterion_options("optimize")
@validation_options
@report_option
@json_option
def optimize(jobs_: list[Job], workers: int, target: str, device: str, patterns: tuple[str, ...],
             opset: int | None, contracts: tuple[str, ...], no_simplify: bool, validate: bool, explain: bool,
             in_place: bool, tune: bool, compress_with: str | None, criterion: dict[str, Any], validation: Any,
             report: str | None,
             as_json: bool, **io: Any) -> None:
    """Optimize MODEL for TARGET: cleanup passes, every fusion, validation; write OUTPUT.

    gsrewrite optimize in.onnx out.onnx (or -o out.onnx; no output: in.opt.onnx); several models: -o FOLDER.
    """
    from gsrewrite.contracts import check_contracts
    from gsrewrite.errors import UsageError
    from gsrewrite.pipelines import CompressOptions, RewriteOptions
    from gsrewrite.pipelines import optimize as run
    from gsrewrite.pipelines.options import Source

    if criterion and compress_with is None:  # a tolerance nothing would use: say so rather than ignore it
        raise UsageError(f"--{next(iter(criterion)).replace('_', '-')} is a tolerance of --compress: give "
                         "--compress STRATEGY too")
    check_report(report, jobs_, read=[("--inputs", validation.inputs if isinstance(validation.inputs, str) else None)])
    compression = None if compress_with is None else CompressOptions(compress_with, **criterion)
    settings: dict[str, Any] = {"target": target, "device": device, "patterns": list(patterns) or ["all"],
                "simplify": not no_simplify, "validate": validation if validate else False, "tune": tune,
                "compress": compression,
                "rewrite": RewriteOptions(opset=opset, explain=explain or report is not None,
                                          contracts=check_contracts(contracts))}

    def one(job: Job) -> None:
        with staged_save(job, io, in_place) as output:  # written while validation runs
            with working(f"optimizing {job.model}..."):
                result = run(Source.mapped(job.model), **settings)
            size = output.save(result.model, result.serialized, result.weights_dir)
        show_result(result, job.model, as_json, io["verbosity"], explain=explain, wrote=job.output, size_after=size,
                    report=report)

    run_jobs(jobs_, workers, one, as_json)
