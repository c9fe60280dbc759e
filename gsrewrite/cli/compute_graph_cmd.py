"""``gsrewrite compute-graph``: drop the shape-calculation subgraphs, write a shape engine."""

from __future__ import annotations

import click

from gsrewrite.cli._options import input_shape_option, input_shapes, json_option
from gsrewrite.cli._output import console, emit_json, to_json
from gsrewrite.reporting import printable


@click.command("compute-graph")
@click.argument("model")
@click.option("-o", "--output", required=True, metavar="OUT.onnx", help="Where to write the compute graph.")
@click.option("--shape-engine", "engine_path", required=True, metavar="OUT.json",
              help="Where to write the shape engine (each dynamic tensor's dims as expressions).")
@input_shape_option
@click.option("--check/--no-check", default=True, show_default=True,
              help="Run the compute graph at up to three input sizes and compare the engine's shapes.")
@click.option("--force", is_flag=True, help="Overwrite the outputs if they exist.")
@json_option
def compute_graph(model: str, output: str, engine_path: str, input_shape: tuple[str, ...], check: bool,
                  force: bool, as_json: bool) -> None:
    """Write MODEL without its shape-calculation subgraphs (shape operands become constants: values when the
    input dims are given, Reshape's 0/-1 form when they are symbolic) and a shape engine JSON."""
    import os

    from gsrewrite.errors import OutputError, ValidationError
    from gsrewrite.model_io import check_output_path, load_model, save_model
    from gsrewrite.model_io.saving import atomic_files, check_distinct_outputs
    from gsrewrite.pipelines.compute_graph import compute_graph as run
    from gsrewrite.pipelines.shape_check import check_summary

    given = input_shapes(input_shape)
    # the model's external data (written above 2 GB) goes to OUT.onnx.data: the engine must not be that file either
    check_distinct_outputs([("the compute graph (-o)", output), ("its external data", output + ".data"),
                            ("the shape engine (--shape-engine)", engine_path)])
    for path in (output, engine_path):
        if os.path.exists(path) and not force:
            raise OutputError(f"{path} exists; pass --force to overwrite it")
        check_output_path(path, input_path=model)
    result = run(load_model(model), given, check=check)
    if result.check is not None and not result.check.ok:
        raise ValidationError("the shape engine disagrees with onnxruntime: "
                              + "; ".join(check_summary(result.check)))
    save_model(result.model, output, input_path=model)
    with atomic_files() as create:
        create(engine_path).write(to_json(result.engine).encode())
    if as_json:
        emit_json(result.to_dict() | {"output": output, "shape_engine": engine_path})
        return
    out = console()
    out.print(f"Wrote {output}: {len(result.model.graph.node)} nodes ({result.removed_nodes} shape-calculation "
              f"nodes removed, {result.replaced} shape operands now constants, {result.shape_ops_left} Shape ops "
              f"left)", markup=False, highlight=False)
    out.print(f"Wrote {engine_path}: {len(result.engine['tensors'])} dynamic tensors", markup=False,
              highlight=False)
    if result.check is not None:
        for line in check_summary(result.check):
            out.print(printable(line), markup=False, highlight=False)
