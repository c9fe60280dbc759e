"""``gsrewrite simplify``: the simplify passes to a fixed point, validated by onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gsrewrite.cli._jobs import Job, io_options, run_jobs
from gsrewrite.cli._output import console, json_option, working
from gsrewrite.cli._rewrite_report import emit, show
from gsrewrite.cli._validation_options import validation_options
from gsrewrite.reporting import rewrite_report

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
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Compare the result with the original in onnxruntime (a pass that breaks it is dropped).")
@click.option("--in-place", is_flag=True, help="Allow OUTPUT to be the input model itself.")
@validation_options
@json_option
def simplify(jobs_: list[Job], workers: int, only: tuple[str, ...], skip: tuple[str, ...], max_fold_bytes: int,
             downcast: bool, keep_metadata: bool, constants: tuple[str, ...], ops: tuple[str, ...], validate: bool,
             in_place: bool, validation: dict[str, Any], as_json: bool, **io: Any) -> None:
    """Simplify MODEL (folding, elimination, shape folding, deduplication) and write it to OUTPUT.

    gsrewrite simplify in.onnx out.onnx (or -o out.onnx; no output: in.opt.onnx). --input-shape NAME:1x128
    (or DIM=1) also fixes those dims in the result, so that more folds.
    """
    settings = {"only": list(only) or None, "skip": list(skip), "max_fold_bytes": max_fold_bytes,
                "input_shapes": validation.get("input_shapes"), "downcast": downcast,
                "validation": validation if validate else None, "keep_metadata": keep_metadata}

    def one(job: Job) -> None:
        _simplify_one(job, settings, (constants, ops), in_place, as_json, io)

    run_jobs(jobs_, workers, one, as_json)


def _simplify_one(job: Job, settings: dict[str, Any], extract: tuple[tuple[str, ...], tuple[str, ...]],
                  in_place: bool, as_json: bool, io: dict[str, Any]) -> None:
    from gsrewrite.cli._background_save import StagedSave
    from gsrewrite.model_io import check_output_path, stored_size
    from gsrewrite.pipelines.simplify import simplify_model

    # before any work: never over the input model (unless --in-place) or a file it reads, nor its data file
    # over a file that is not the output's own
    external = io["external_data"] or None
    check_output_path(job.output, input_path=job.model, in_place=in_place, external_data=external)
    _extraction_paths(*extract, job.output)
    # the output is written while validation runs (and put in place only if it passed)
    with StagedSave(job.output, input_path=job.model, in_place=in_place, external_data=external,
                    size_threshold=io["size_threshold"]) as staged:
        with working(f"simplifying {job.model}..."):
            result = simplify_model(job.model, on_serialized=staged.begin, **settings)
        extracted = _extractions(result.model, *extract, job.output, job.model)

        def original_stats() -> None:  # the table's "before" column, computed while the output is written
            result.note_size(result.original, stored_size(job.model, result.original))
            result.before  # noqa: B018 - computed (and cached) now

        size, _ = staged.finish(result.model, result.serialized, original_stats)
    result.note_size(result.model, size)  # the sizes in the report come from the files, not re-serialization
    written = [_write(path, payload, job.model) for path, payload in extracted]
    _report(result, job.output, size, written, as_json, io["verbosity"])


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
        from gsrewrite.errors import OutputError
        from gsrewrite.model_io.saving import atomic_files

        try:  # a temp file like save_model's: removed on error or interrupt, swept if the process is killed
            with atomic_files() as create:
                np.save(create(str(path.absolute())), payload, allow_pickle=False)
        except OSError as exc:
            raise OutputError(f"cannot write '{path}': {exc.strerror or exc}") from exc
    else:
        save_model(payload, path, input_path=input_path)
    return str(path)


def _report(result: Any, output: str, size: int, written: list[str], as_json: bool, verbosity: int) -> None:
    if as_json:
        emit(result.to_dict() | {"extracted": written}, output, result.before.size, size)
        return
    report = rewrite_report(result.before, result.after, {f"Changes per pass ({result.rounds} rounds)": result.counts},
                            dropped=result.dropped, validation=result.validation, verbose=verbosity > 0)
    if result.skipped_folds:
        first, why = next(iter(result.skipped_folds.items()))
        others = len(result.skipped_folds) - 1
        more = f" (and {others} more; --json lists them)" if others else ""
        report.blocks.append(f"Not folded: {first}: {why}{more}")
    show(report, output, size, verbosity)
    if verbosity >= 0:
        for path in written:
            console().print(f"Wrote {path}", markup=False, highlight=False, soft_wrap=True)
