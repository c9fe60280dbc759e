"""``gsrewrite info MODEL``: what a model is made of, as tables or as JSON."""

from __future__ import annotations

import click

from gsrewrite.cli._output import console, emit_json, human_bytes, json_option, table
from gsrewrite.info import ModelInfo, TensorSpec, model_info


@click.command("info")
@click.argument("model", metavar="MODEL")
@json_option
def info(model: str, as_json: bool) -> None:
    """Summarize MODEL: producer, IR and opset versions, inputs and outputs, operators, parameters.

    External data is validated but not read, so this is quick even for very large models.
    """
    report = model_info(model)
    if as_json:
        emit_json(report)
        return
    out = console()
    out.print(table("Model", ["field", "value"], _summary_rows(report)))
    out.print(table("Inputs and outputs", ["kind", "name", "type", "shape"], _io_rows(report)))
    out.print(table("Operators", ["op", "count"], report.op_histogram.items()))
    if report.functions:
        out.print(table("Functions", ["function"], [[f] for f in report.functions]))


def _summary_rows(report: ModelInfo) -> list[tuple[str, str]]:
    producer = f"{report.producer_name} {report.producer_version}".strip() or "(unknown)"
    opsets = ", ".join(f"{domain} {version}" for domain, version in report.opset_imports.items())
    rows = [
        ("file", report.path or ""),
        ("producer", producer),
        ("IR version", str(report.ir_version)),
        ("opsets", opsets),
        ("nodes", f"{report.node_count:,} ({report.node_count_total:,} with subgraphs)"),
        ("parameters", f"{report.parameter_count:,} ({human_bytes(report.parameter_bytes)})"),
    ]
    if report.external_data_files:
        files = ", ".join(report.external_data_files)
        rows.append(("external data", f"{human_bytes(report.external_data_bytes)} in {files}"))
    rows.extend((f"metadata {key}", value) for key, value in report.metadata.items())
    return rows


def _io_rows(report: ModelInfo) -> list[tuple[str, str, str, str]]:
    rows = [("input", s.name, s.dtype, _shape_text(s)) for s in report.inputs]
    rows += [("output", s.name, s.dtype, _shape_text(s)) for s in report.outputs]
    return rows


def _shape_text(spec: TensorSpec) -> str:
    if spec.shape is None:
        return "?"
    return "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
