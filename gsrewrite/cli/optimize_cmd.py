"""``gsrewrite optimize``: simplify + every fusion for the target + validation (then ``--tune``, ``--compress``),
with the before/after table."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
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
    optimize_target_option,
    patterns_option,
    report_option,
    validate_option,
    validation_options,
)
from gsrewrite.cli._output import working
from gsrewrite.cli._report import check_report, show_result


@click.command()
@io_options
@optimize_target_option
@device_option
@patterns_option
@opset_option
@contract_option
@click.option("--max-length", type=click.IntRange(min=1), default=None, metavar="N",
              help="shared-kv-buffer: the buffer's length (validation pads the past to it); --target genai: the "
                   "longest sequence generated (default: the context length).")
@click.option("--tokenizer", default=None, metavar="DIR",
              help="A tokenizer folder (tokenizer.json, as transformers saves it): validation feeds real text to the "
                   "token-id inputs; --target genai also copies it into the output and takes the special tokens "
                   "from it.")
@click.option("--context-length", type=click.IntRange(min=1), default=None, metavar="N",
              help="--target genai: the model's context length (default: its position tables, else the tokenizer "
                   "folder's config.json, else 4096).")
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
             opset: int | None, contracts: tuple[str, ...], max_length: int | None, tokenizer: str | None,
             context_length: int | None, no_simplify: bool, validate: bool, explain: bool, in_place: bool,
             tune: bool, compress_with: str | None, criterion: dict[str, Any], validation: Any, report: str | None,
             as_json: bool, **io: Any) -> None:
    """Optimize MODEL for TARGET: cleanup passes, every fusion, validation; write OUTPUT.

    gsrewrite optimize in.onnx out.onnx (or -o out.onnx; no output: in.opt.onnx); several models: -o FOLDER.
    --target genai writes a folder (OUTPUT, default in.genai) that onnxruntime-genai runs.
    """
    from gsrewrite.errors import UsageError
    from gsrewrite.pipelines import CompressOptions, RewriteOptions
    from gsrewrite.pipelines import optimize as run
    from gsrewrite.pipelines.options import Source

    if criterion and compress_with is None:  # a tolerance nothing would use: say so rather than ignore it
        raise UsageError(f"--{next(iter(criterion)).replace('_', '-')} is a tolerance of --compress: give "
                         "--compress STRATEGY too")
    check_report(report, jobs_, read=[("--inputs", validation.inputs if isinstance(validation.inputs, str) else None)])
    compression = None if compress_with is None else CompressOptions(compress_with, **criterion)
    if tokenizer is not None:  # validation feeds real text to the token-id inputs
        validation = dataclasses.replace(validation, tokenizer=tokenizer)
    settings: dict[str, Any] = {"target": target, "device": device, "patterns": list(patterns) or ["all"],
                "simplify": not no_simplify, "validate": validation if validate else False, "tune": tune,
                "compress": compression,
                "rewrite": RewriteOptions(opset=opset, explain=explain or report is not None,
                                          contracts=tuple(contracts), max_length=max_length)}
    if target == "genai":
        from gsrewrite.pipelines.genai import GenaiOptions, longest_sequence

        settings["rewrite"] = dataclasses.replace(settings["rewrite"], positions=longest_sequence(
            GenaiOptions(tokenizer, context_length, max_length)))
        _genai_jobs(jobs_, workers, settings, GenaiRequest(tokenizer, context_length, max_length, explain, report),
                    as_json, io)
        return
    if context_length is not None:
        raise UsageError("--context-length is an option of --target genai")
    if max_length is not None and "shared-kv-buffer" not in contracts:
        raise UsageError("--max-length is an option of --contract shared-kv-buffer and --target genai")

    def one(job: Job) -> None:
        with staged_save(job, io, in_place) as output:  # written while validation runs
            with working(f"optimizing {job.model}..."):
                result = run(Source.mapped(job.model), **settings)
            size = output.save(result.model, result.serialized, result.weights_dir)
        show_result(result, job.model, as_json, io["verbosity"], explain=explain, wrote=job.output, size_after=size,
                    report=report)

    run_jobs(jobs_, workers, one, as_json)


@dataclass(frozen=True)
class GenaiRequest:
    """``--target genai``'s own options: the tokenizer folder, the lengths, ``--explain``, ``--report``."""

    tokenizer: str | None
    context_length: int | None
    max_length: int | None
    explain: bool
    report: str | None = None


def _genai_jobs(jobs: list[Job], workers: int, settings: dict[str, Any], request: GenaiRequest, as_json: bool,
                io: dict[str, Any]) -> None:
    """Each job's folder for onnxruntime-genai: checked before any work, written after the validated rewrite."""
    from gsrewrite.pipelines import optimize as run
    from gsrewrite.pipelines.genai import GenaiOptions, check_folder, save_genai
    from gsrewrite.pipelines.options import Source

    GenaiOptions(request.tokenizer, request.context_length, request.max_length).check()
    for job in jobs:
        check_folder(job.output, io["force"])

    def one(job: Job) -> None:
        with working(f"optimizing {job.model} for onnxruntime-genai..."):
            result = run(Source.mapped(job.model), **settings)
        written = save_genai(result, job.output, tokenizer=request.tokenizer, context_length=request.context_length,
                             max_length=request.max_length, force=io["force"], input_path=job.model)
        size = sum(os.path.getsize(path) for path in written)
        show_result(result, job.model, as_json, io["verbosity"], explain=request.explain, wrote=job.output,
                    size_after=size, report=request.report)

    run_jobs(jobs, workers, one, as_json)
