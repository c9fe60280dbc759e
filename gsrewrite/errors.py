"""Typed exceptions raised by the gsrewrite library.

Every error a user can cause (a bad model, a bad option, a bad pattern file, a broken plugin) is a
:class:`GsrewriteError`. The CLI turns these into one line on stderr and exit code 2; anything else is a
bug in gsrewrite and is reported as such.
"""

from __future__ import annotations

from collections.abc import Iterable


class GsrewriteError(Exception):
    """Base class of every error caused by user input (models, options, pattern files, plugins)."""

    exit_code = 2


# --- models: loading and saving ---------------------------------------------------------------------
class ModelError(GsrewriteError):
    """A model cannot be read, or is not a valid ONNX model."""


class ModelNotFoundError(ModelError):
    """The model path does not exist or is not a regular file."""


class NotAnOnnxModelError(ModelError):
    """The file is empty, truncated, or not an ONNX protobuf."""


class ExternalDataError(ModelError):
    """External tensor data is missing, unsafe (outside the model folder) or inconsistent."""


class InvalidModelError(ModelError):
    """The model parses but is structurally invalid (cycles, dangling inputs, bad tensors, ...)."""


class ModelTooLargeError(ModelError):
    """A declared tensor size is larger than gsrewrite is willing to allocate."""


class OutputError(GsrewriteError):
    """An output file cannot be written (would overwrite the input, folder missing, ...)."""


class NoSpaceError(OutputError):
    """A file gsrewrite writes (an output, a temp or scratch file) does not fit: its file system is full, the disk
    quota is reached or the file size limit (``ulimit -f``) is; the message names the folder and the file's role."""


# --- options, inputs --------------------------------------------------------------------------------
class UsageError(GsrewriteError):
    """An option or argument value is invalid (unknown pattern, bad shape spec, ...)."""


class InputDataError(GsrewriteError):
    """Input data given for validation or profiling does not fit the model."""


# --- patterns and plugins ---------------------------------------------------------------------------
class PatternError(GsrewriteError):
    """A pattern file is malformed or refers to something that does not exist."""


class UnknownPatternError(UsageError):
    """A pattern or family name that no registered pattern has."""


class DuplicateNameError(GsrewriteError):
    """A registry received a second entry under a name it already holds."""


class PluginError(GsrewriteError):
    """A plugin failed to load or raised inside a hook; the message names the plugin."""


# --- rewriting --------------------------------------------------------------------------------------
class RewriteError(GsrewriteError):
    """A rewrite could not be carried out (for example an opset conversion that failed)."""


class ValidationError(GsrewriteError):
    """onnxruntime could not run a model for validation (as opposed to outputs that disagree)."""


class CannotValidateError(ValidationError):
    """onnxruntime cannot run the original model (unknown op or domain, future opset, no outputs): a rewrite
    cannot be checked; ``--no-validate`` rewrites without checking."""


# --- compression ------------------------------------------------------------------------------------
class CompressionRefused(GsrewriteError):
    """A compressed model is not written because the result, not the input, is wrong: the CLI exits 1.
    ``result`` holds what was measured (a ``gsrewrite.pipelines.compress.CompressResult``)."""

    exit_code = 1

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class OutOfToleranceError(CompressionRefused):
    """The compressed model's outputs miss the strategy's tolerance, even with nodes left uncompressed."""


class NothingToCompressError(CompressionRefused):
    """The strategy changed no weight of the model (int4 on a CNN: no MatMul weight to quantize)."""


class SlowerModelError(CompressionRefused):
    """The compressed model was measured slower than its input by more than the allowed factor."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known names closest to ``name``, or an empty string when none is close:
    names that start with ``name`` (``seq`` -> ``sequence``, at least 3 characters), then difflib's."""
    import difflib

    names = list(dict.fromkeys(known))
    prefix = name.lower() if len(name) >= 3 else None
    close = [k for k in names if prefix is not None and k.lower().startswith(prefix) and k != name][:3]
    close += [k for k in difflib.get_close_matches(name, names, n=3, cutoff=0.6) if k not in close][:3 - len(close)]
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
