"""The validation options shared by every command that checks a result with onnxruntime."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click


def validation_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --inputs, --input-shape, --runs, --atol, --rtol, --seed, --max-memory; the command receives ``validation``,
    a dict of keyword arguments for :func:`gsrewrite.validate`."""
    options = [
        click.option("--inputs", "v_inputs", metavar="FILE.npz",
                     help="Input arrays (keys = input names) instead of generated inputs."),
        click.option("--input-shape", "v_shapes", multiple=True, metavar="NAME:1x128|DIM=2",
                     help="Shape of a generated input, or size of a symbolic dim (repeatable)."),
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
    from gsrewrite.validation import parse_input_shape

    shapes = dict(parse_input_shape(spec) for spec in kwargs.pop("v_shapes"))
    return {
        "inputs": kwargs.pop("v_inputs"),
        "input_shapes": shapes or None,
        "runs": kwargs.pop("v_runs"),
        "atol": kwargs.pop("v_atol"),
        "rtol": kwargs.pop("v_rtol"),
        "seed": kwargs.pop("v_seed"),
        "max_memory": _max_memory(kwargs.pop("v_max_memory")),
    }


def _max_memory(value: str | None) -> int | None:
    from gsrewrite.validation.memory import parse_size

    return None if value is None else parse_size(value)
