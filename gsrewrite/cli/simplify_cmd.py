"""``gsrewrite simplify``: the simplify passes to a fixed point, validated by onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gsrewrite.cli._jobs import Job, io_options, run_jobs, staged_save
from gsrewrite.cli._options import (
    in_place_option,
    json_option,
    report_option,
    validate_option,
    validation_options,
)
from gsrewrite.cli._output import console, working
from gsrewrite.cli._report import check_report, emit, show, write_html, wrote_report

_DEFAULT_MAX_FOLD_BYTES = 1 << 20  # gsrewrite.graph.fold.DEFAULT_MAX_BYTES, without importing the engine


@click.command()
@io_options
@click.option("--only", multiple=True, metavar="NAME",
              help="Run only this pass (repeatable; see 'gsrewrite passes list').")
@click.option("--skip", multiple=True, metavar="NAME", help="Do not run this pass (repeatable).")
@click.option("--max-fold-bytes", type=click.IntRange(min=0), default=_DEFAULT_MAX_FOLD_BYTES, show_default=True,
              help="Largest tensor constant folding may create.")
@click.option("--downcast", is_flag=True, help="Also store float64/int64 constants as float32/int32 where allowed.")
@click.option("--keep-metadata", is_flag=True, help="Keep the exporter's debug metadata on nodes and inputs/outputs.")
@click.option("--extract-constant", "constants", multiple=True, metavar="NAME",
              help="Also write this constant of the result to OUTPUT_STEM.NAME.npy (repeatable).")
@click.option("--extract-op", "ops", multiple=True, metavar="NAME",
              help="Also write this node of the result, alone, to OUTPUT_STEM.NAME.onnx (repeatable).")
@validate_option("Compare the result with the original in onnxruntime (a pass that breaks it is dropped).")
@in_place_option
@validation_options
@report_option
@json_option
def simplify(jobs_: list[Job], workers: int, only: tuple[str, ...], skip: tuple[str, ...], max_fold_bytes: int,
             downcast: bool, keep_metadata: bool, constants: tuple[str, ...], ops: tuple[str, ...], validate: bool,
             in_place: bool, validation: Any, report: str | None, as_json: bool, **io: Any) -> None:
    """Simplify MODEL (folding, elimination, shape folding, deduplication) and write it to OUTPUT.

    gsrewrite simplify in.onnx out.onnx (or -o out.onnx; no output: in.opt.onnx). --input-shape NAME:1x128
    (or DIM=1) also fixes those dims in the result, so that more folds.
    """
    from gsrewrite.pipelines import SimplifyLimits

    extracted = [(f"--extract {path.name}", str(path)) for path in _extraction_paths(constants, ops, jobs_[0].output)] \
        if report is not None and len(jobs_) == 1 else []
    check_report(report, jobs_, extracted,
                 read=[("--inputs", validation.inputs if isinstance(validation.inputs, str) else None)])
    settings = {"only": list(only) or None, "skip": list(skip), "limits": SimplifyLimits(max_fold_bytes=max_fold_bytes),
                "input_shapes": validation.input_shapes, "downcast": downcast,
                "validate": validation if validate else False, "keep_metadata": keep_metadata}

    def one(job: Job) -> None:
        _simplify_one(job, settings, (constants, ops), in_place, as_json, io | {"report": report})

    run_jobs(jobs_, workers, one, as_json)


def _simplify_one(job: Job, settings: dict[str, Any], extract: tuple[tuple[str, ...], tuple[str, ...]],
                  in_place: bool, as_json: bool, io: dict[str, Any]) -> None:
    from gsrewrite.model_io import stored_size
    from gsrewrite.model_io.weights import weights_from
    from gsrewrite.pipelines import simplify
    from gsrewrite.pipelines.options import Source

    _extraction_paths(*extract, job.output)  # before any work: never two outputs on one file
    with staged_save(job, io, in_place) as output:  # written while validation runs, put in place if it passed
        with working(f"simplifying {job.model}..."):
            result = simplify(Source.mapped(job.model), **settings)
        with weights_from(result.weights_dir):  # the extractions read weights from the model's files
            extracted = _extractions(result.model, *extract, job.output, job.model)
        size = output.save(result.model, result.serialized, result.weights_dir)
    # the sizes in the report come from the files, not re-serialization
    result.note_size(result.original, stored_size(job.model, result.original))
    result.note_size(result.model, size)
    with weights_from(result.weights_dir):
        written = [_write(path, payload, job.model) for path, payload in extracted]
    page = write_html(result, io["report"], model=job.model, output=job.output, command="simplify",
                      size_before=result.before.size, size_after=size)
    _report(result, job.output, size, written, as_json, io["verbosity"], (io["report"], page))


def _extraction_paths(constants: tuple[str, ...], ops: tuple[str, ...], output: str) -> list[Path]:
    """Where --extract-constant/--extract-op write, beside the output; refused (before any work) when two of them,
    or one and the output, are one file (two names can make one file name: a/b and a_b)."""
    from gsrewrite.model_io.saving import check_distinct_outputs
    from gsrewrite.simplifier.extract import safe_file_name

    out = Path(output)
    stem = out.name.removesuffix(".onnx")
    paths = [out.with_name(f"{stem}.{safe_file_name(n)}.npy") for n in constants]
    paths += [out.with_name(f"{stem}.{safe_file_name(n)}.onnx") for n in ops]
    names = [*(f"--extract-constant {n}" for n in constants), *(f"--extract-op {n}" for n in ops)]
    check_distinct_outputs([("the simplified model", output), *zip(names, paths, strict=True)])
    return paths


def _extractions(model: Any, constants: tuple[str, ...], ops: tuple[str, ...], output: str,
                 input_path: str) -> list[tuple[Path, Any]]:
    """What --extract-constant/--extract-op write, computed (and every name checked) before writing."""
    from gsrewrite.model_io import check_output_path
    from gsrewrite.simplifier import extract_constant, extract_node

    payloads = [extract_constant(model, n) for n in constants] + [extract_node(model, n) for n in ops]
    planned = list(zip(_extraction_paths(constants, ops, output), payloads, strict=True))
    for path, _payload in planned:
        check_output_path(path, input_path=input_path)
    return planned


def _write(path: Path, payload: Any, input_path: str) -> str:
    import numpy as np

    from gsrewrite.model_io import save_model

    if isinstance(payload, np.ndarray):
        from gsrewrite.model_io.saving import atomic_files, write_error

        try:  # a temp file like save_model's: removed on error or interrupt, swept if the process is killed
            with atomic_files() as create:
                np.save(create(str(path.absolute())), payload, allow_pickle=False)
        except OSError as exc:
            raise write_error(exc, str(path)) from exc
    else:
        save_model(payload, path, input_path=input_path)
    return str(path)


def _report(result: Any, output: str, size: int, written: list[str], as_json: bool, verbosity: int,
            page: tuple[str | None, int | None]) -> None:
    if as_json:
        emit(result.to_dict() | {"extracted": written}, output, result.before.size, size, page[0])
        return
    show(result.report_blocks(verbose=verbosity > 0), output, size, verbosity)
    if verbosity >= 0:
        for path in written:
            console().print(f"Wrote {path}", markup=False, highlight=False, soft_wrap=True)
    wrote_report(*page)
