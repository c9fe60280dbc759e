"""``gsrewrite shapes``: static and symbolic shapes of every tensor."""

from __future__ import annotations

from typing import Any

import click

from gsrewrite.cli._options import input_shape_option, input_shapes, json_option
from gsrewrite.cli._output import console, emit_json, table
from gsrewrite.reporting import printable


@click.command()
@click.argument("model")
@input_shape_option
@click.option("--all", "show_all", is_flag=True, help="List every tensor, not only inputs and outputs.")
@click.option("--check", is_flag=True,
              help="Run the model in onnxruntime at three input sizes and compare every tensor's shape.")
@click.option("-o", "--output", default=None, metavar="OUT.onnx",
              help="Write the model with the inferred shapes as value_info (expressions as dim_param).")
@click.option("--force", is_flag=True, help="Overwrite OUT.onnx if it exists.")
@json_option
def shapes(model: str, input_shape: tuple[str, ...], show_all: bool, check: bool, output: str | None,
           force: bool, as_json: bool) -> None:
    """Infer the shape of every tensor of MODEL, with dynamic dims as expressions of the input dims
    (batch, seq, seq*2, (h - 3)//2 + 1)."""
    from gsrewrite.errors import OutputError, ValidationError
    from gsrewrite.model_io import check_output_path, load_model, save_model
    from gsrewrite.shapes.walk import annotate, infer_symbolic, shape_text

    given = input_shapes(input_shape)

    if output is not None:
        import os

        if os.path.exists(output) and not force:
            raise OutputError(f"{output} exists; pass --force to overwrite it")
        check_output_path(output, input_path=model)
    if output is None and not check:  # the weights are not needed (nothing runs, nothing is written)
        from gsrewrite.model_io.weightless import load_weightless

        proto = load_weightless(model)
    else:
        proto = load_model(model)
    result = infer_symbolic(proto, given)
    verdict = None
    if check:
        from gsrewrite.pipelines.shape_check import check_shapes, check_summary

        verdict = check_shapes(proto, result)
    if output is not None:
        from gsrewrite.validation.runner import check_runnable, why_unrunnable

        annotated = annotate(proto, result)
        reason = why_unrunnable(annotated)
        if reason is not None:
            raise ValidationError(f"not writing {output}: {reason}")
        check_runnable(annotated)  # every model gsrewrite writes loads in onnxruntime
        save_model(annotated, output, input_path=model)
    if as_json:
        data = result.to_dict() if show_all else {k: v for k, v in result.to_dict().items() if k != "tensors"}
        if verdict is not None:
            data["check"] = verdict.to_dict()
        if output is not None:
            data["output"] = output
        emit_json(data)
    else:
        out = console()
        out.print(table("Symbols", ["symbol", "from"], [
            (symbol, where if symbol in result.input_symbols else f"{where} (no input gives it: unknown)")
            for symbol, where in sorted(result.symbols.items())]))
        rows = [("input", n, _shape(shape_text(result.shape(n)))) for n in result.inputs]
        rows += [("output", n, _shape(shape_text(result.shape(n)))) for n in result.outputs]
        if show_all:
            listed = {*result.inputs, *result.outputs}
            rows += [("tensor", n, _shape(shape_text(i.shape))) for n, i in result.tensors.items() if n not in listed]
        out.print(table("Shapes", ["kind", "name", "shape"], rows))
        for line in _summary(result):
            out.print(printable(line), markup=False, highlight=False)
        if verdict is not None:
            for line in check_summary(verdict):
                out.print(printable(line), markup=False, highlight=False)
        if output is not None:
            out.print(f"Wrote {output}", markup=False, highlight=False)
    if verdict is not None and not verdict.ok:
        raise ValidationError("inferred shapes differ from onnxruntime's (see above)")


def _summary(result: Any) -> list[str]:
    """How many tensors have a known shape; those that do not, and the symbols no input gives."""
    known = len(result.tensors) - len(result.unknown)
    line = f"{known} of {len(result.tensors)} tensors have a known shape"
    if not result.unknown:
        return [line]
    more = ", ..." if len(result.unknown) > _NAMED else ""
    lines = [f"{line}; {len(result.unknown)} do not (their rank or a dim is unknown): "
             f"{', '.join(result.unknown[:_NAMED])}{more}"]
    unknown_symbols = result.unknown_symbols()
    if unknown_symbols:
        more = ", ..." if len(unknown_symbols) > _NAMED else ""
        lines.append(f"dims no input gives (known only when the model runs): "
                     f"{', '.join(unknown_symbols[:_NAMED])}{more}")
    return lines


#: tensors and symbols named in the summary, at most
_NAMED = 5


def _shape(dims: list[str | int] | None) -> str:
    return "?" if dims is None else "[" + ", ".join(str(d) for d in dims) + "]"
