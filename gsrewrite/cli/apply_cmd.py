"""``gsrewrite apply`` and ``gsrewrite explain``: pattern rewrites, validated by onnxruntime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gsrewrite.cli._jobs import Job, io_options, run_jobs
from gsrewrite.cli._output import console, json_option, working
from gsrewrite.cli._rewrite_report import emit, print_explain, show
from gsrewrite.cli._validation_options import validation_options
from gsrewrite.model_io import serialized_size, stored_size

_target_option = click.option("--target", type=click.Choice(["onnx", "ort"]), default="ort", show_default=True,
                              help="onnx: standard ONNX ops only; ort: also onnxruntime contrib ops.")
device_option = click.option(
    "--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
    help="Where the model will run: patterns that pay off on the other kind only are skipped (on cpu, "
         "LayerNormalization instead of onnxruntime's slower SkipLayerNormalization).")
_pattern_options = [
    click.option("-p", "--pattern", "patterns", multiple=True, metavar="NAME",
                 help="Pattern or family name, or 'all' (repeatable; default: all)."),
    click.option("--pattern-file", "pattern_files", multiple=True, metavar="FILE",
                 help="Extra pattern file (TOML) to apply (repeatable)."),
    click.option("--opset", type=click.IntRange(min=1), default=None,
                 help="Convert the model to this opset first (allows e.g. Gelu-20 with --target onnx)."),
]


def pattern_options(func: Any) -> Any:
    for option in reversed(_pattern_options):
        func = option(func)
    return _target_option(device_option(func))


@click.command()
@io_options
@pattern_options
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Compare the result with the original in onnxruntime (bisect and drop a guilty pattern).")
@click.option("--explain", is_flag=True, help="Also report, per pattern, the deepest near miss and why.")
@click.option("--in-place", is_flag=True, help="Allow OUTPUT to be the input model itself.")
@validation_options
@json_option
def apply(jobs_: list[Job], workers: int, patterns: tuple[str, ...], pattern_files: tuple[str, ...],
          opset: int | None, target: str, device: str, validate: bool, explain: bool, in_place: bool,
          validation: dict[str, Any], as_json: bool, **io: Any) -> None:
    """Rewrite MODEL with the selected patterns and write the validated result to OUTPUT.

    gsrewrite apply --pattern mha in.onnx out.onnx (or -o out.onnx; no output: in.opt.onnx).
    """
    settings = (patterns, pattern_files, opset, target, device, validate, explain, validation)

    def one(job: Job) -> None:
        from gsrewrite.cli._background_save import StagedSave
        from gsrewrite.model_io import check_output_path

        external = io["external_data"] or None
        check_output_path(job.output, input_path=job.model, in_place=in_place, external_data=external)
        with StagedSave(job.output, input_path=job.model, in_place=in_place, external_data=external,
                        size_threshold=io["size_threshold"]) as staged:  # written while validation runs
            result, size_before = _run(job.model, *settings, staged.begin)
            size_after, _ = staged.finish(result.model, result.serialized, lambda: None)
        report(result, size_before, explain, as_json, size_after, wrote=job.output, verbosity=io["verbosity"])

    run_jobs(jobs_, workers, one, as_json)


@click.command()
@click.argument("model")
@pattern_options
@json_option
def explain(model: str, patterns: tuple[str, ...], pattern_files: tuple[str, ...], opset: int | None, target: str,
            device: str, as_json: bool) -> None:
    """Show, per pattern, how often it matches MODEL and where the best near miss failed (writes nothing)."""
    result, size_before = _run(model, patterns, pattern_files, opset, target, device, False, True, {})
    report(result, size_before, True, as_json)


def _run(model: str, patterns: tuple[str, ...], files: tuple[str, ...], opset: int | None, target: str,
         device: str, validate: bool, explain: bool, validation: dict[str, Any],
         on_serialized: Callable[[Any, bytes], None] | None = None) -> tuple[Any, int]:
    from gsrewrite.model_io import load_model
    from gsrewrite.pipelines.apply import rewrite_model

    original = load_model(model)
    names = list(patterns) or ([] if files else ["all"])
    with working("rewriting..."):
        result = rewrite_model(original, names, target=target, device=device,
                               validation=validation if validate else None, pattern_files=files, explain=explain,
                               opset=opset, source_path=model, on_serialized=on_serialized)
    return result, stored_size(model, original)


def report(result: Any, size_before: int, explain: bool, as_json: bool, size_after: int | None = None,
           wrote: str | None = None, verbosity: int = 0) -> None:
    """The report (and explanations), or the JSON report. ``size_after``: the bytes written (default: the
    serialized size of the result); ``wrote``: the output path, when one was written."""
    if size_after is None:
        size_after = serialized_size(result.model)
    if as_json:
        emit(result.to_dict(), wrote, size_before, size_after)
        return
    show(result.report_blocks(verbose=verbosity > 0, size_before=size_before, size_after=size_after), wrote,
         size_after, verbosity)
    if explain and verbosity >= 0:
        print_explain(console(), result)
