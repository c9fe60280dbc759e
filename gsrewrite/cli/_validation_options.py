"""The validation options shared by every command that checks a result with onnxruntime, and the criterion
options of the commands that judge by statistics (``validate``, ``compress``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from gsrewrite.cli._options import input_shape_option, input_shapes


def validation_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --inputs, --input-shape, --runs, --atol, --rtol, --seed, --max-memory; the command receives ``validation``,
    a dict of keyword arguments for :func:`gsrewrite.validate`."""
    options = [
        click.option("--inputs", "v_inputs", metavar="FILE.npz",
                     help="Input arrays (keys = input names) instead of generated inputs."),
        input_shape_option,
        click.option("--runs", "v_runs", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Number of random input sets (or repeats of --inputs)."),
        click.option("--atol", "v_atol", type=click.FloatRange(min=0), default=1e-4, show_default=True,
                     help="Absolute tolerance."),
        click.option("--rtol", "v_rtol", type=click.FloatRange(min=0), default=1e-3, show_default=True,
                     help="Relative tolerance."),
        click.option("--seed", "v_seed", type=int, default=0, show_default=True,
                     help="Seed of the generated inputs."),
        click.option("--max-memory", "v_max_memory", metavar="SIZE", default=None,
                     help="Memory budget of a reference run, e.g. 2GB (default: half the available memory); "
                          "larger input sizes are skipped."),
    ]

    @functools.wraps(func)  # keeps click's __click_params__ gathered so far
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["validation"] = collect(kwargs)
        return func(*args, **kwargs)

    wrapped: Callable[..., Any] = wrapper
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped


def collect(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the v_* options from click's kwargs into keyword arguments for ``gsrewrite.validate``."""
    return {
        "inputs": kwargs.pop("v_inputs"),
        "input_shapes": input_shapes(kwargs.pop("input_shape")),
        "runs": kwargs.pop("v_runs"),
        "atol": kwargs.pop("v_atol"),
        "rtol": kwargs.pop("v_rtol"),
        "seed": kwargs.pop("v_seed"),
        "max_memory": _max_memory(kwargs.pop("v_max_memory")),
    }


def _max_memory(value: str | None) -> int | None:
    from gsrewrite.validation.memory import parse_size

    return None if value is None else parse_size(value)


#: the criterion options: option names, metavar, click type, what it does in ``validate`` / in ``compress``
_CRITERION = (
    (("--cosine", "--min-cosine", "c_min_cosine"), "MIN", click.FloatRange(-1, 1),
     "Judge float outputs by cosine similarity >= MIN instead of --atol/--rtol (what compress uses).",
     "Override the strategy's minimum cosine per float output."),
    (("--max-abs", "c_max_abs"), "MAX", click.FloatRange(min=0),
     "Judge float outputs by max abs error <= MAX instead of --atol/--rtol.",
     "Also require this max abs error per float output."),
    (("--min-agreement", "c_min_agreement"), "RATE", click.FloatRange(0, 1),
     "Integer/bool outputs (labels): the share of elements that must equal the original's, 0..1 (default 1: all).",
     "Override the strategy's minimum share of equal elements in integer/bool outputs (labels), 0..1."),
    (("--min-top1", "c_min_top1"), "RATE", click.FloatRange(0, 1),
     "Class scores (docs/validation.md): the share of rows that must keep their top-1 class, 0..1.",
     "Override the strategy's minimum share of rows of class scores keeping their top-1 class, 0..1."),
)


def criterion_options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add --cosine (alias --min-cosine), --max-abs, --min-agreement, --min-top1 to ``command`` (``validate``: the
    pass/fail rule; ``compress``: overrides of the strategy's tolerance); the command receives ``criterion``, a
    dict of the values given (keys ``min_cosine``, ``max_abs``, ``min_agreement``, ``min_top1``)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {key: kwargs.pop(key) for key in [k for k in kwargs if k.startswith("c_")]}
            kwargs["criterion"] = {key[2:]: value for key, value in values.items() if value is not None}
            return func(*args, **kwargs)

        wrapped: Callable[..., Any] = wrapper
        for names, metavar, kind, in_validate, in_compress in reversed(_CRITERION):
            wrapped = click.option(*names, type=kind, metavar=metavar, default=None,
                                   help=in_validate if command == "validate" else in_compress)(wrapped)
        return wrapped

    return decorate
