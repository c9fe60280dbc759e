"""``gsrewrite optimize``: simplify + every fusion for the target + validation, with the before/after table."""

from __future__ import annotations

from typing import Any

import click

from gsrewrite.cli._output import working
from gsrewrite.cli._validation_options import validation_options
from gsrewrite.cli.apply_cmd import device_option, report


@click.command()
@click.argument("model")
@click.option("-o", "--output", required=True, help="Where to write the optimized model.")
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
@validation_options
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
def optimize(model: str, output: str, target: str, device: str, patterns: tuple[str, ...], opset: int | None,
             no_simplify: bool, validate: bool, explain: bool, in_place: bool, validation: dict[str, Any],
             as_json: bool) -> None:
    """Optimize MODEL for TARGET: cleanup passes, every fusion, validation; write OUTPUT."""
    from gsrewrite.cli._background_save import StagedSave
    from gsrewrite.model_io import check_output_path, load_model, stored_size
    from gsrewrite.pipelines.optimize import optimize_model

    check_output_path(output, input_path=model, in_place=in_place)
    original = load_model(model)
    with StagedSave(output, input_path=model, in_place=in_place) as staged:  # written while validation runs
        with working("optimizing..."):
            result = optimize_model(original, target=target, device=device, patterns=list(patterns) or ["all"],
                                    opset=opset, simplify=not no_simplify,
                                    validation=validation if validate else None, explain=explain,
                                    source_path=model, on_serialized=staged.begin)
        size_after, size_before = staged.finish(result.model, result.serialized,
                                                lambda: stored_size(model, original))
    report(result, size_before, explain, as_json, size_after)
