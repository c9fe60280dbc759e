"""``gsrewrite validate``: compare a candidate model's outputs with the original's in onnxruntime."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from gsrewrite.cli._options import criterion_options, json_option, validation_options
from gsrewrite.cli._output import console, emit_json, table
from gsrewrite.reporting import printable

if TYPE_CHECKING:
    from gsrewrite.validation import OutputComparison, ValidationReport

_COLUMNS = ("output", "shape", "max abs", "max rel", "% outside tol", "cosine", "agree", "nan/inf", "verdict")


@click.command()
@click.argument("original")
@click.argument("candidate")
@validation_options
@criterion_options("validate")
@json_option
def validate(original: str, candidate: str, validation: Any, criterion: dict[str, Any],
             as_json: bool) -> None:
    """Run ORIGINAL and CANDIDATE in onnxruntime on the same inputs and compare every output.

    An element disagrees when |cand - orig| > atol and |cand - orig| / |orig| > rtol (with --cosine / --max-abs:
    float outputs are judged by those instead, as compress does); integer and bool outputs must be equal
    (--min-agreement: in that share of elements); class scores keep their top-1 class in --min-top1 of their
    rows when given; a NaN or infinity the original does not have there always disagrees. Without --inputs,
    inputs are generated from the models' input signature. Both models run at several input sizes (the sample,
    a small and a long one; see docs/validation.md).
    Exit code 0: the models agree; 1: they do not; 2: bad input.
    """
    from gsrewrite.validation import validate as run_validation

    report = run_validation(original, candidate, **validation.kwargs(), **criterion)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_report(report)
    if not report.ok:
        click.get_current_context().exit(1)


def _print_report(report: ValidationReport) -> None:
    out = console()
    title = f"{report.runs} run(s) per size, {report.rule}"
    out.print(table(title, _COLUMNS, [_row(o) for o in report.outputs]))
    for size in report.sizes:
        shapes = ", ".join(f"{name} {'x'.join(map(str, shape)) or 'scalar'}" for name, shape in size["shapes"].items())
        out.print(printable(f"{size['name']} inputs: {shapes}"), markup=False, soft_wrap=True)
    if report.extra_outputs:
        out.print(printable("outputs only in the candidate (not compared): " + ", ".join(report.extra_outputs)),
                  markup=False, soft_wrap=True)
    out.print(printable(report.summary()), markup=False, soft_wrap=True)


def _row(o: OutputComparison) -> list[object]:
    verdict = o.verdict + (f" ({', '.join(o.failed_sets)})" if o.failed_sets else "") + (
        f": {', '.join(o.failed)}" if o.failed else "")
    return [
        o.name,
        "x".join(str(d) for d in o.shape) or "scalar",
        o.max_abs,
        o.max_rel,
        f"{100 * o.mismatch_fraction:.4g}",
        "" if o.cosine is None else f"{o.cosine:.6f}",
        _agreement(o),
        _non_finite(o),
        verdict,
    ]


def _agreement(o: OutputComparison) -> str:
    """``99.6%`` (integer/bool: equal elements), ``top-1 98%`` (class scores: rows keeping their class), or ``-``."""
    from gsrewrite.validation.criteria import percent

    if o.agreement is not None:
        return percent(o.agreement)
    return "-" if o.top1 is None else f"top-1 {percent(o.top1)}"


def _non_finite(o: OutputComparison) -> str:
    """``-`` when both models are finite, else ``nan A/B inf C/D`` (original/candidate counts)."""
    if not (o.nan_original or o.nan_candidate or o.inf_original or o.inf_candidate):
        return "-"
    return f"nan {o.nan_original}/{o.nan_candidate} inf {o.inf_original}/{o.inf_candidate}"
