"""The options several commands share, each declared once: the commands apply these decorators."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from gsrewrite.shapes.input_shapes import InputShapes

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
target_option = click.option("--target", type=click.Choice(["onnx", "ort"]), default="ort", show_default=True,
                             help="onnx: standard ONNX ops only; ort: also onnxruntime contrib ops.")
#: optimize's: also ``genai``, a folder onnxruntime-genai's generate loop runs
optimize_target_option = click.option(
    "--target", type=click.Choice(["onnx", "ort", "genai"]), default="ort", show_default=True,
    help="onnx: standard ONNX ops only; ort: also onnxruntime contrib ops; genai: a folder onnxruntime-genai runs "
         "(ort's fusions under the contracts batch1-chunks and shared-kv-buffer; a decoder with a KV cache only).")
device_option = click.option(
    "--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
    help="Where the model will run: patterns that pay off on the other kind only are skipped (on cpu, "
         "LayerNormalization instead of onnxruntime's slower SkipLayerNormalization).")
patterns_option = click.option("-p", "--pattern", "patterns", multiple=True, metavar="NAME",
                               help="Pattern or family name, or 'all' (repeatable; default: all).")
pattern_files_option = click.option("--pattern-file", "pattern_files", multiple=True, metavar="FILE",
                                    help="Extra pattern file (TOML) to apply (repeatable).")
opset_option = click.option("--opset", type=click.IntRange(min=1), default=None,
                            help="Convert the model to this opset first (allows e.g. Gelu-20 with --target onnx).")
explain_option = click.option("--explain", is_flag=True,
                              help="Also report, per pattern, the deepest near miss and why.")
no_simplify_option = click.option("--no-simplify", is_flag=True, help="Skip the cleanup passes (fusions only).")
in_place_option = click.option("--in-place", is_flag=True, help="Allow OUTPUT to be the input model itself.")
report_option = click.option(
    "--report", "report", default=None, metavar="FILE.html",
    help="Also write an HTML report (one self-contained file): each rewritten region drawn before and after, why "
         "patterns did not fire, what it bought (counts, size, MACs, memory, validation).")
inputs_option = click.option("--inputs", "inputs", default=None, metavar="FILE.npz",
                             help="Input arrays (keys = input names) instead of generated inputs.")
#: ``--input-shape`` (repeatable), one grammar for every command (:mod:`gsrewrite.shapes.input_shapes`): the command
#: receives ``input_shape``, the values as typed (so that ``-j N`` hands them to its worker processes as they
#: were), and reads them with :func:`input_shapes`
input_shape_option = click.option(
    "--input-shape", "input_shape", multiple=True, metavar="NAME:2x16|NAME:2,seq|SYMBOL=INT",
    help="An input's shape (ids:2x16 or ids:2,16; a dim may be a symbol or an expression: ids:2,seq) or a "
         "symbol's size (seq=128), wherever it appears; repeatable. A name the model does not have is an error.")


def validate_option(what: str) -> Decorator:
    """``--validate/--no-validate`` (default on); ``what`` says what validation does for this command."""
    return click.option("--validate/--no-validate", default=True, show_default=True, help=what)


def stacked(*options: Decorator) -> Decorator:
    """The decorators as one, applied in the order listed (the first is the outermost, as if written on top)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


#: --target, --device, -p, --pattern-file, --opset: which patterns run, for what (apply and explain)
contract_option = click.option(
    "--contract", "contracts", multiple=True, metavar="NAME",
    help="Accept a narrower input contract for a faster fused op (repeatable): batch1-chunks (GroupQueryAttention: "
         "several new tokens over a past only at batch 1), unpadded-prompts (GroupQueryAttention's own rotary: a "
         "batched prompt only without padding), unpadded-queries (a sliding window as GroupQueryAttention's "
         "local_window_size: every new token visible in the mask), unpadded (no padding anywhere, positions from the "
         "past length: GroupQueryAttention takes no bias from the mask; implies the two before), shared-kv-buffer "
         "(past and present one buffer of "
         "--max-length positions, the mask says how much is valid), int8-kv-cache (the cache as int8 with scales). "
         "Each validated and stated in the output's metadata and report.")
pattern_options = stacked(target_option, device_option, patterns_option, pattern_files_option, opset_option,
                          contract_option)


def validation_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --inputs, --input-shape, --runs, --atol, --rtol, --seed, --max-memory; the command receives ``validation``,
    a :class:`~gsrewrite.pipelines.ValidationOptions`."""
    options = stacked(
        inputs_option,
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
        click.option("--noise-factor", "v_noise_factor", type=click.FloatRange(min=0), default=8.0,
                     show_default=True,
                     help="Where the original's outputs move by more than --atol under onnxruntime's own "
                          "optimizer, allow this many times that movement (0: --atol/--rtol only)."),
    )

    @functools.wraps(func)  # keeps click's __click_params__ gathered so far
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["validation"] = _validation(kwargs)
        return func(*args, **kwargs)

    return options(wrapper)


def input_shapes(specs: tuple[str, ...]) -> InputShapes | None:
    """``--input-shape`` values parsed (one line and exit 2 on bad syntax), None when none was given."""
    from gsrewrite.shapes.input_shapes import parse_input_shapes

    return parse_input_shapes(specs) or None


def _validation(kwargs: dict[str, Any]) -> Any:
    """Pop the validation options from click's kwargs into a ValidationOptions."""
    from gsrewrite.pipelines.options import ValidationOptions
    from gsrewrite.validation.memory import parse_size

    budget = kwargs.pop("v_max_memory")
    return ValidationOptions(inputs=kwargs.pop("inputs"), input_shapes=input_shapes(kwargs.pop("input_shape")),
                             runs=kwargs.pop("v_runs"), atol=kwargs.pop("v_atol"), rtol=kwargs.pop("v_rtol"),
                             seed=kwargs.pop("v_seed"), max_memory=None if budget is None else parse_size(budget),
                             noise_factor=kwargs.pop("v_noise_factor"))


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


def _criterion_help(command: str, in_validate: str, in_compress: str) -> str:
    if command == "validate":
        return in_validate
    return f"With --compress: {in_compress[0].lower()}{in_compress[1:]}" if command == "optimize" else in_compress


def criterion_options(command: str) -> Decorator:
    """Add --cosine (alias --min-cosine), --max-abs, --min-agreement, --min-top1 to ``command`` (``validate``: the
    pass/fail rule; ``compress``: overrides of the strategy's tolerance; ``optimize``: the same, for its
    ``--compress``); the command receives ``criterion``, a dict of the values given (keys ``min_cosine``,
    ``max_abs``, ``min_agreement``, ``min_top1``)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {key: kwargs.pop(key) for key in [k for k in kwargs if k.startswith("c_")]}
            kwargs["criterion"] = {key[2:]: value for key, value in values.items() if value is not None}
            return func(*args, **kwargs)

        options = [click.option(*names, type=kind, metavar=metavar, default=None,
                                help=_criterion_help(command, in_validate, in_compress))
                   for names, metavar, kind, in_validate, in_compress in _CRITERION]
        return stacked(*options)(wrapper)

    return decorate
