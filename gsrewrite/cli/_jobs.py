"""Input and output paths of the rewriting commands (apply, optimize, simplify), as onnxsim users type them.

``gsrewrite optimize IN [OUT]``: the output is positional (``-o OUT`` works too); with no output the result goes
to ``IN_STEM.opt.onnx`` beside the input, never over an existing file unless ``--force``. Several inputs take
``-o DIR`` (each output keeps its input's file name) and ``-j N`` runs N of them at once, each in its own
process. ``-q``/``-v`` are accepted after the subcommand too.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gsrewrite.errors import OutputError, UsageError

log = logging.getLogger("gsrewrite")

#: what the default output's name adds to the input's stem
DEFAULT_SUFFIX = ".opt.onnx"
#: the same for the folder of ``--target genai``
GENAI_SUFFIX = ".genai"
#: options that describe the paths of one run; the rest is forwarded to each worker as given
_PATH_PARAMS = frozenset({"paths", "output", "jobs"})


@dataclass(frozen=True)
class Job:
    """One model to rewrite and where its result goes."""

    model: str
    output: str


def io_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``MODEL... [OUTPUT]``, ``-o``, ``--force``, ``-j``, ``--external-data``, ``--size-threshold``, ``-q``, ``-v``;
    the command receives ``jobs_`` (the planned :class:`Job` list), ``force``, ``workers``, ``external_data``,
    ``size_threshold`` and ``verbosity`` (``-v`` count minus ``-q`` count, with the group's)."""
    options = [
        click.argument("paths", nargs=-1, required=True, metavar="MODEL... [OUTPUT]"),
        click.option("-o", "--output", default=None, metavar="PATH",
                     help=f"Output file, or folder for several models (default: MODEL_STEM{DEFAULT_SUFFIX} "
                          "beside the model)."),
        click.option("--force", is_flag=True, help="Overwrite an existing output file (never the input)."),
        click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Models rewritten at once (separate processes)."),
        click.option("--external-data", is_flag=True,
                     help="Write large tensors to OUTPUT.data (standard ONNX external data)."),
        click.option("--size-threshold", type=click.IntRange(min=0), default=1024, show_default=True,
                     help="With --external-data: smallest tensor (bytes) moved out."),
        click.option("-v", "--verbose", "sub_verbose", count=True, help="More detail (repeatable)."),
        click.option("-q", "--quiet", "sub_quiet", count=True, help="Print only the 'Wrote' line."),
    ]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        group = ctx.parent.params if ctx.parent is not None else {}
        verbosity = kwargs.pop("sub_verbose") - kwargs.pop("sub_quiet")
        verbosity += group.get("verbose", 0) - group.get("quiet", 0)
        if verbosity != group.get("verbose", 0) - group.get("quiet", 0):
            _set_log_level(verbosity)
        kwargs["verbosity"] = verbosity
        # optimize --target genai writes a folder per model (onnxruntime-genai's: the model, its config, ...)
        kwargs["jobs_"] = plan_jobs(kwargs.pop("paths"), kwargs.pop("output"), force=kwargs["force"],
                                    folders=kwargs.get("target") == "genai")
        kwargs["workers"] = kwargs.pop("jobs")
        return func(*args, **kwargs)

    wrapped: Callable[..., Any] = wrapper
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def staged_save(job: Job, io: dict[str, Any], in_place: bool = False) -> Any:
    """The job's output as a :class:`~gsrewrite.model_io.staging.StagedSave` (``with`` it around the pipeline
    call: the result's bytes are written while they are validated), its path checked first: never over the input
    (unless ``in_place``) or a file the input reads, before any work."""
    from gsrewrite.model_io import check_output_path
    from gsrewrite.model_io.staging import StagedSave

    external = io["external_data"] or None
    check_output_path(job.output, input_path=job.model, in_place=in_place, external_data=external)
    return StagedSave(job.output, input_path=job.model, in_place=in_place, external_data=external,
                      size_threshold=io["size_threshold"])


def plan_jobs(paths: Sequence[str], output: str | None, *, force: bool, folders: bool = False) -> list[Job]:
    """Inputs and outputs from the positional paths and ``-o``; names checked, nothing written. ``folders``: each
    output is a folder (``IN OUT``: OUT itself; ``IN``: ``IN_STEM.genai`` beside it; several: ``FOLDER/STEM``)."""
    models = list(paths)
    if output is None and len(paths) == 2:  # IN OUT, as onnxsim and onnxslim take them
        models, output = [paths[0]], paths[1]
        if folders:
            return [Job(paths[0], output)]
        if os.path.isfile(output) and not force:  # maybe two models meant as inputs: never lose one
            raise OutputError(f"'{output}' exists: add --force to overwrite it with the result of '{paths[0]}' "
                              "(several models: -o FOLDER)")
    if len(models) > 1 and (output is None or not _is_folder(output)):
        raise UsageError("several models need -o FOLDER (an existing folder): each output keeps its model's name")
    if folders:
        jobs = [Job(m, _folder_for(m, output, len(models) > 1)) for m in models]
        _check_distinct(jobs)
        return jobs
    jobs = [Job(m, _output_for(m, output, force)) for m in models]
    _check_distinct(jobs)
    return jobs


def _is_folder(output: str) -> bool:
    return os.path.isdir(output) or output.endswith(os.sep)


def _output_for(model: str, output: str | None, force: bool) -> str:
    if output is None:
        path = Path(model).with_name(Path(model).name.removesuffix(".onnx") + DEFAULT_SUFFIX)
        if path.exists() and not force:
            raise OutputError(f"'{path}' exists: give an output path, or --force to overwrite it")
        return str(path)
    if _is_folder(output):
        if not os.path.isdir(output):
            raise OutputError(f"cannot write into '{output}': no such folder")
        return str(Path(output) / Path(model).name)
    return output


def _folder_for(model: str, output: str | None, several: bool) -> str:
    stem = Path(model).name.removesuffix(".onnx")
    if output is None:
        return str(Path(model).with_name(stem + GENAI_SUFFIX))
    return str(Path(output) / stem) if several else output


def _check_distinct(jobs: list[Job]) -> None:
    from gsrewrite.model_io.saving import check_distinct_outputs

    check_distinct_outputs([(f"the result of '{job.model}'", job.output) for job in jobs])


def run_jobs(jobs: list[Job], workers: int, one: Callable[[Job], None], as_json: bool = False) -> None:
    """``one(job)`` for each job, here (one worker, or one job), else each in its own ``gsrewrite`` process with
    the same options, ``workers`` at a time; their output is printed in input order. A failed model makes the
    command fail after the others ran (exit code of the first failure). With ``as_json`` and several models the
    reports form one JSON list."""
    listed = as_json and len(jobs) > 1
    if workers == 1 or len(jobs) == 1:
        for index, job in enumerate(jobs):
            if listed:
                click.echo("[" if index == 0 else ",")
            one(job)
        if listed:
            click.echo("]")
        return
    ctx = click.get_current_context()
    argv = _forwarded(ctx)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(lambda job: _subprocess(argv, ctx.info_name or "", job), jobs))
    failures = []
    for index, result in enumerate(done):
        if listed:
            click.echo("[" if index == 0 else ",")
        failures.append(_show(result))
    if listed:
        click.echo("]")
    failures = [code for code in failures if code]
    if failures:
        ctx.exit(failures[0])


def _subprocess(argv: tuple[list[str], list[str]], command: str, job: Job) -> subprocess.CompletedProcess[str]:
    group_args, command_args = argv
    cmd = [sys.executable, "-m", "gsrewrite", *group_args, command, job.model, "-o", job.output, *command_args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _show(result: subprocess.CompletedProcess[str]) -> int:
    if result.stdout:
        click.echo(result.stdout, nl=False)
    if result.stderr:
        click.echo(result.stderr, nl=False, err=True)
    return result.returncode


def _forwarded(ctx: click.Context) -> tuple[list[str], list[str]]:
    """The group's and the command's options as given on the command line (not the paths)."""
    group = _as_args(ctx.parent) if ctx.parent is not None else []
    return group, _as_args(ctx, skip=_PATH_PARAMS)


def _as_args(ctx: click.Context, skip: frozenset[str] = frozenset()) -> list[str]:
    args: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in skip or param.name is None:
            continue
        value = ctx.params.get(param.name)
        if value is None or value == param.default or value == ():
            continue
        args += _option_args(param, value)
    return args


def _option_args(param: click.Option, value: Any) -> list[str]:
    if param.count:
        return [param.opts[0]] * int(value)
    if param.is_flag:
        if param.secondary_opts and not value:
            return [param.secondary_opts[0]]
        return [param.opts[0]] if value else []
    values = value if param.multiple else [value]
    return [item for v in values for item in (param.opts[0], str(v))]


def _set_log_level(verbosity: int) -> None:
    level = max(logging.DEBUG, min(logging.CRITICAL, logging.WARNING - 10 * verbosity))
    logging.getLogger("gsrewrite").setLevel(level)
