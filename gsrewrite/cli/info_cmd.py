"""``gsrewrite info MODEL``: what a model is made of, as tables or as JSON."""

from __future__ import annotations

from typing import Any

import click
import onnx

from gsrewrite.cli._options import json_option
from gsrewrite.cli._output import console, emit_json, human_bytes, table
from gsrewrite.info import ModelInfo, TensorSpec, model_info


@click.command("info")
@click.argument("model", metavar="MODEL")
@json_option
def info(model: str, as_json: bool) -> None:
    """Summarize MODEL: producer, IR and opset versions, inputs and outputs, operators, parameters.

    External data is validated but not read, so this is quick even for very large models.
    """
    from gsrewrite.model_io.weightless import load_weightless

    proto = load_weightless(model)  # once, for the facts and the totals
    report = model_info(proto, path=model)
    totals = _totals(proto)
    if as_json:
        emit_json(report.to_dict() | {"totals": totals} if hasattr(report, "to_dict") else report)
        return
    out = console()
    rows = _summary_rows(report)
    if totals is not None:
        missing, unknown = totals["unprofiled"], totals["unknown_symbols"]
        note = f" (not counted: {', '.join(f'{op} x{n}' for op, n in missing.items())})" if missing else ""
        if unknown:
            note += f" (in dims no input gives, unknown until the model runs: {', '.join(unknown)})"
        rows.append(("compute", f"{_count(totals['macs'])} MACs{note}, {totals['params']:,} parameters"))
    out.print(table("Model", ["field", "value"], rows))
    out.print(table("Inputs and outputs", ["kind", "name", "type", "shape"], _io_rows(report)))
    out.print(table("Operators", ["op", "count"], report.op_histogram.items()))
    if report.functions:
        out.print(table("Functions", ["function"], [[f] for f in report.functions]))


def _totals(model: onnx.ModelProto) -> dict[str, Any] | None:
    """MACs (symbolic with dynamic dims; ``unprofiled``: the ops whose MACs are unknown) and parameters."""
    from gsrewrite.profiling.costs import count_json, profile_model

    try:  # no weight is read (the model is loaded weightless) and no sparsity is scanned
        profile = profile_model(model, sparsity=False)
    except Exception:  # the totals are extra: a model the profile cannot read still gets its info
        return None
    return {"macs": count_json(profile.macs), "params": profile.params, "unprofiled": profile.unprofiled,
            "unknown_symbols": profile.unknown_symbols()}


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


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
