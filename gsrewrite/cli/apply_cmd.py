"""``gsrewrite apply`` and ``gsrewrite explain``: pattern rewrites, validated by onnxruntime."""

from __future__ import annotations

from typing import Any

import click

from gsrewrite.cli._jobs import Job, io_options, run_jobs, staged_save
from gsrewrite.cli._options import (
    explain_option,
    in_place_option,
    json_option,
    no_simplify_option,
    pattern_options,
    report_option,
    validate_option,
    validation_options,
)
from gsrewrite.cli._output import working
from gsrewrite.cli._report import check_report, show_result


@click.command()
@io_options
@pattern_options
@validate_option("Compare the result with the original in onnxruntime (bisect and drop a guilty pattern).")
@explain_option
@in_place_option
@validation_options
@report_option
@json_option
def apply(jobs_: list[Job], workers: int, patterns: tuple[str, ...], pattern_files: tuple[str, ...],
          opset: int | None, target: str, device: str, contracts: tuple[str, ...], validate: bool, explain: bool,
          in_place: bool, validation: Any, report: str | None, as_json: bool, **io: Any) -> None:
    """Rewrite MODEL with the selected patterns and write the validated result to OUTPUT.

    gsrewrite apply --pattern mha in.onnx out.onnx (or -o out.onnx; no output: in.opt.onnx).
    """
    check_report(report, jobs_, read=[("--inputs", validation.inputs if isinstance(validation.inputs, str) else None),
                                      *(("--pattern-file", path) for path in pattern_files)])
    settings = {"target": target, "device": device, "validate": validation if validate else False,
                "pattern_files": pattern_files, "explain": explain or report is not None, "opset": opset,
                "contracts": contracts}

    def one(job: Job) -> None:
        with staged_save(job, io, in_place) as output:  # written while validation runs
            result = _run(job.model, patterns, settings)
            size = output.save(result.model, result.serialized, result.weights_dir)
        show_result(result, job.model, as_json, io["verbosity"], explain=explain, wrote=job.output, size_after=size,
                    report=report)

    run_jobs(jobs_, workers, one, as_json)


@click.command()
@click.argument("model")
@pattern_options
@no_simplify_option
@click.option("--validate", is_flag=True,
              help="Also validate in onnxruntime as optimize does: a pattern whose rewrites disagree is reported "
                   "dropped, with the numbers.")
@json_option
def explain(model: str, patterns: tuple[str, ...], pattern_files: tuple[str, ...], opset: int | None, target: str,
            device: str, contracts: tuple[str, ...], no_simplify: bool, validate: bool, as_json: bool) -> None:
    """Show, per pattern, its matches on MODEL and optimize's verdict: applied, skipped by a device or contract
    policy, refused by the engine, the deepest near miss, or (--validate) dropped by validation (writes nothing)."""
    from gsrewrite.pipelines import RewriteOptions, optimize
    from gsrewrite.pipelines.options import Source

    names = list(patterns) or ([] if pattern_files else ["all"])
    rewrite = RewriteOptions(tuple(pattern_files), opset, True, contracts=tuple(contracts))
    with working(f"explaining {model}..."):
        result = optimize(Source.mapped(model), target=target, device=device, patterns=names,
                          simplify=not no_simplify, validate=validate, rewrite=rewrite)
    show_result(result, model, as_json, 0, explain=True)


def _run(model: str, patterns: tuple[str, ...], settings: dict[str, Any]) -> Any:
    from gsrewrite.pipelines.apply import Fusions, apply_fusions
    from gsrewrite.pipelines.options import RewriteOptions, Source

    names = list(patterns) or ([] if settings["pattern_files"] else ["all"])
    options = RewriteOptions(tuple(settings["pattern_files"]), settings["opset"], settings["explain"],
                             contracts=tuple(settings["contracts"]))
    with working(f"rewriting {model}..."):
        return apply_fusions(Source.mapped(model), Fusions(tuple(names), settings["target"], settings["device"],
                                                           options), settings["validate"])
