"""``gsrewrite simplify``: the simplify passes to a fixed point, validated by onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gsrewrite.cli._output import console, emit_json, human_bytes, json_option, table, working
from gsrewrite.cli._validation_options import validation_options

_DEFAULT_MAX_FOLD_BYTES = 1 << 20  # gsrewrite.graph.fold.DEFAULT_MAX_BYTES, without importing the engine


@click.command()
@click.argument("model")
@click.option("-o", "--output", required=True, help="Where to write the simplified model.")
@click.option("--only", multiple=True, metavar="NAME",
              help="Run only this pass (repeatable; see 'gsrewrite passes list').")
@click.option("--skip", multiple=True, metavar="NAME", help="Do not run this pass (repeatable).")
@click.option("--max-fold-bytes", type=click.IntRange(min=0), default=_DEFAULT_MAX_FOLD_BYTES, show_default=True,
              help="Largest tensor constant folding may create.")
@click.option("--downcast", is_flag=True, help="Also store float64/int64 constants as float32/int32 where allowed.")
@click.option("--keep-metadata", is_flag=True, help="Keep the exporter's debug metadata on nodes and inputs/outputs.")
@click.option("--external-data", is_flag=True, help="Write large tensors to OUTPUT.data (standard ONNX external data).")
@click.option("--size-threshold", type=click.IntRange(min=0), default=1024, show_default=True,
              help="With --external-data: smallest tensor (bytes) moved out.")
@click.option("--extract-constant", "constants", multiple=True, metavar="NAME",
              help="Also write this constant of the result to OUTPUT_STEM.NAME.npy (repeatable).")
@click.option("--extract-op", "ops", multiple=True, metavar="NAME",
              help="Also write this node of the result, alone, to OUTPUT_STEM.NAME.onnx (repeatable).")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Compare the result with the original in onnxruntime (a pass that breaks it is dropped).")
@click.option("--in-place", is_flag=True, help="Allow OUTPUT to be the input model itself.")
@validation_options
@json_option
def simplify(model: str, output: str, only: tuple[str, ...], skip: tuple[str, ...], max_fold_bytes: int,
             downcast: bool, keep_metadata: bool, external_data: bool, size_threshold: int,
             constants: tuple[str, ...], ops: tuple[str, ...], validate: bool, in_place: bool,
             validation: dict[str, Any], as_json: bool) -> None:
    """Simplify MODEL (folding, elimination, shape folding, deduplication) and write it to OUTPUT.

    --input-shape NAME:1x128 (or DIM=1) also fixes those dims in the result, so that more folds.
    """
    from gsrewrite.cli._background_save import StagedSave
    from gsrewrite.model_io import check_output_path, stored_size
    from gsrewrite.pipelines.simplify import simplify_model

    # before any work: never over the input model (unless --in-place) or a file it reads, nor its data file
    # over a file that is not the output's own
    check_output_path(output, input_path=model, in_place=in_place, external_data=external_data or None)
    # the output is written while validation runs (and put in place only if it passed)
    with StagedSave(output, input_path=model, in_place=in_place, external_data=external_data or None,
                    size_threshold=size_threshold) as staged:
        with working("simplifying..."):
            result = simplify_model(model, only=list(only) or None, skip=list(skip), max_fold_bytes=max_fold_bytes,
                                    input_shapes=validation.get("input_shapes"), downcast=downcast,
                                    validation=validation if validate else None, keep_metadata=keep_metadata,
                                    on_serialized=staged.begin)
        extracted = _extractions(result.model, constants, ops, output, model)

        def original_stats() -> None:  # the table's "before" column, computed while the output is written
            result.note_size(result.original, stored_size(model, result.original))
            result.before  # noqa: B018 - computed (and cached) now

        size, _ = staged.finish(result.model, result.serialized, original_stats)
    result.note_size(result.model, size)  # the sizes in the report come from the files, not re-serialization
    written = [_write(path, payload, model) for path, payload in extracted]
    _report(result, written, as_json)


def _extractions(model: Any, constants: tuple[str, ...], ops: tuple[str, ...], output: str,
                 input_path: str) -> list[tuple[Path, Any]]:
    """What --extract-constant/--extract-op write, computed (and every name checked) before writing."""
    from gsrewrite.model_io import check_output_path
    from gsrewrite.simplifier import extract_constant, extract_node
    from gsrewrite.simplifier.extract import safe_file_name

    out = Path(output)
    stem = out.name.removesuffix(".onnx")
    planned = [(out.with_name(f"{stem}.{safe_file_name(n)}.npy"), extract_constant(model, n)) for n in constants]
    planned += [(out.with_name(f"{stem}.{safe_file_name(n)}.onnx"), extract_node(model, n)) for n in ops]
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


def _report(result: Any, written: list[str], as_json: bool) -> None:
    if as_json:
        emit_json(result.to_dict() | {"extracted": written})
        return
    out = console()
    out.print(table("Before / after (changed ops)", ("", "before", "after", "change"), _rows(result)))
    if result.counts:
        counts = sorted(result.counts.items())
        out.print(table(f"Changes per pass ({result.rounds} rounds)", ("pass", "changes"), counts))
    else:
        out.print("Nothing to simplify: the graph is unchanged.")
    for name, why in result.dropped.items():
        out.print(f"[yellow]Dropped {name}[/yellow]: its rewrites fail validation ({why})")
    if result.skipped_folds:
        first, why = next(iter(result.skipped_folds.items()))
        others = len(result.skipped_folds) - 1
        more = f" (and {others} more; --json lists them)" if others else ""
        out.print(f"Not folded: {first}: {why}{more}", soft_wrap=True)
    if result.validation is not None:
        verdict = "[green]OK[/green]" if result.validation.ok else "[red]FAILED (original kept)[/red]"
        summary = result.validation.summary().removeprefix("OK: ").removeprefix("FAILED: ")
        out.print(f"Validation: {verdict} {summary}", soft_wrap=True)
    for path in written:
        out.print(f"Wrote {path}", soft_wrap=True)


def _rows(result: Any) -> list[tuple[str, Any, Any, str]]:
    """Changed op counts, then total nodes, size and parameters."""
    before, after = result.before, result.after
    rows = [(op, before.ops.get(op, 0), after.ops.get(op, 0), f"{after.ops.get(op, 0) - before.ops.get(op, 0):+d}")
            for op in sorted(set(before.ops) | set(after.ops)) if before.ops.get(op, 0) != after.ops.get(op, 0)]
    totals = [("nodes (all graphs)", before.nodes_total, after.nodes_total),
              ("parameters", before.parameters, after.parameters)]
    rows += [(label, f"{b:,}", f"{a:,}", f"{a - b:+,d}") for label, b, a in totals]
    rows.append(("size", human_bytes(before.size), human_bytes(after.size), f"{after.size - before.size:+,d} B"))
    return rows
