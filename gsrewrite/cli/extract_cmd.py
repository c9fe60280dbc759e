"""``gsrewrite extract``: a self-contained sub-model between named tensors, validated against the full model."""

from __future__ import annotations

import click

from gsrewrite.cli._options import input_shape_option, input_shapes, json_option, validate_option
from gsrewrite.cli._output import console, emit_json, working
from gsrewrite.reporting import printable


def _names(values: tuple[str, ...]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


@click.command()
@click.argument("model")
@click.option("--inputs", "inputs", multiple=True, required=True, metavar="A,B",
              help="Tensors that become the sub-model's inputs (comma-separated or repeated).")
@click.option("--outputs", "outputs", multiple=True, required=True, metavar="C",
              help="Tensors that become the sub-model's outputs (comma-separated or repeated).")
@click.option("-o", "--output", required=True, metavar="SUB.onnx", help="Where to write the sub-model.")
@validate_option("Check the sub-model against the same tensors of the full model in onnxruntime.")
@click.option("--input-data", metavar="FILE.npz", default=None,
              help="Inputs of the full model for the check (default: generated).")
@input_shape_option
@json_option
def extract(model: str, inputs: tuple[str, ...], outputs: tuple[str, ...], output: str, validate: bool,
            input_data: str | None, input_shape: tuple[str, ...], as_json: bool) -> None:
    """Write the part of MODEL that computes --outputs from --inputs to SUB.onnx, with only the initializers it
    needs, typed inputs and outputs, and (by default) checked against the full model."""
    from gsrewrite.errors import ValidationError
    from gsrewrite.model_io import check_output_path, load_model, save_model
    from gsrewrite.model_io.saving import check_not_read
    from gsrewrite.pipelines.extract import extract as run_extract

    check_output_path(output, input_path=model)
    check_not_read(output, [("--input-data", input_data)])
    sizes = input_shapes(input_shape)
    with working(f"extracting from {model}..."):
        result = run_extract(load_model(model), _names(inputs), _names(outputs), validate=validate,
                             input_shapes=sizes, given=input_data)
    if result.validated and not result.ok:
        raise ValidationError(f"the extracted model disagrees with the full model: {result.summary()}")
    save_model(result.model, output, input_path=model)
    if as_json:
        emit_json(result.to_dict() | {"output": output})
        return
    console().print(printable(f"Wrote {output}: {result.summary()}"), markup=False, highlight=False, soft_wrap=True)
