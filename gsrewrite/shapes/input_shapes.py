"""``--input-shape``: one grammar and one parser for every command, and the check of its names against a model.

Each value is one of

* ``NAME:2x16``, ``NAME:2,16``, ``NAME:[2,16]`` (``NAME:[]``: a scalar): the whole shape of input ``NAME``.
  Commas separate any dims, so a dim may be an expression in symbols (``ids:2,seq``, ``ids:batch,2*seq``):
  the analysis commands (shapes, profile, memory, compute-graph) keep it symbolic; the commands that run the
  model need sizes, which ``SYMBOL=INT`` may give (``ids:2,seq seq=128``). ``x`` separates numbers only
  (``2xseq`` is not a shape: write ``2,seq``). The last ``:`` separates the name, so names may contain ``:``;
* ``SYMBOL=INT``: the size of a symbolic dim wherever it appears (``batch=1``, ``sequence=128``).

The library takes the same as a mapping (``{"ids": (2, 128), "batch": 1}``, dims as ints or expressions).
A name that is neither an input nor a symbol of the model is an error naming the close ones
(:func:`check_names`): a typo never leaves a dim silently unbound.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from gsrewrite.errors import UsageError, did_you_mean
from gsrewrite.shapes import symdim
from gsrewrite.shapes.symdim import DimValue

#: The largest size ``--input-shape`` takes (a dim, a symbol's size, a number in an expression): a tensor of two
#: such dims is past what int64 (onnxruntime's and ONNX's sizes) can count already
MAX_SIZE = 2**62
_NUMBERS_BY_X = re.compile(r"[0-9]+(\s*x\s*[0-9]+)+")
_EXPECTED = "expected NAME:2x16, NAME:2,seq or SYMBOL=INT"


@dataclass
class InputShapes:
    """Input shapes given by the caller: whole inputs' dims (ints or expressions) and symbols' sizes."""

    shapes: dict[str, list[DimValue]] = field(default_factory=dict)
    bindings: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.shapes or self.bindings)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is given: an input's shape or a symbol's size."""
        return name in self.shapes or name in self.bindings

    def symbols(self) -> set[str]:
        """The symbols the given shapes use (``ids:2,seq`` introduces ``seq``, which ``seq=N`` may bind)."""
        return {name for dims in self.shapes.values() for d in dims for name in symdim.symbols(d)}

    def sizes(self, name: str) -> tuple[int, ...]:
        """Input ``name``'s shape as sizes, its symbols bound by :attr:`bindings`; :class:`UsageError` names a
        symbol left without a size (the commands that run the model need sizes)."""
        dims = self.shapes[name]
        try:
            return tuple(symdim.evaluate(d, self.bindings) for d in dims)
        except KeyError as exc:
            raise UsageError(f"--input-shape {name}:{','.join(map(str, dims))}: running the model needs sizes; "
                             f"give {exc.args[0]}=N too") from None


def parse_input_shapes(specs: Iterable[str]) -> InputShapes:
    """``--input-shape`` values (see the module docstring) as :class:`InputShapes`; :class:`UsageError` on bad
    syntax, a negative size, or one name given two different values."""
    result = InputShapes()
    for spec in specs:
        if ":" in spec:
            name, _, text = spec.rpartition(":")
            name = name.strip()
            if not name:
                raise UsageError(f"--input-shape {_shown(spec)}: {_EXPECTED}")
            _put(result.shapes, name, _dims(spec, text), spec)
        else:
            name, sep, value = spec.partition("=")
            name = name.strip()
            if not sep or not name:
                raise UsageError(f"--input-shape {_shown(spec)}: {_EXPECTED}")
            if not re.fullmatch(r"[0-9]+", value.strip()):
                raise UsageError(f"--input-shape {_shown(spec)}: the size of {name!r} must be a non-negative integer")
            digits = value.strip().lstrip("0")  # (not int() of thousands of digits: Python refuses those)
            _put(result.bindings, name, _bounded(int(digits) if len(digits) < 20 else MAX_SIZE + 1, spec), spec)
    return result


def _bounded(dim: DimValue, spec: object) -> DimValue:
    """``dim``, unless it is or holds a number over :data:`MAX_SIZE` (:class:`UsageError`)."""
    if max(_numbers(dim), default=0) > MAX_SIZE:
        raise UsageError(f"--input-shape {_shown(str(spec))}: a size is over {MAX_SIZE:,} (2**62), more than any "
                         "tensor can have")
    return dim


def _numbers(dim: DimValue) -> Iterator[int]:
    """The magnitudes of the numbers in ``dim``: itself, or an expression's coefficients (and its atoms')."""
    if isinstance(dim, int):
        yield abs(dim)
        return
    for monomial, coefficient in dim.terms:
        yield abs(coefficient)
        for atom, _ in monomial:
            if isinstance(atom, symdim.Fn):
                for arg in atom.args:
                    yield from _numbers(arg)


def _dims(spec: str, text: str) -> list[DimValue]:
    body = text.strip()
    if not body:  # a scalar is NAME:[]
        raise UsageError(f"--input-shape {_shown(spec)}: {_EXPECTED}")
    if body[:1] + body[-1:] in ("[]", "()"):
        body = body[1:-1].strip()
    if not body:
        return []
    parts = re.split(r"\s*x\s*", body) if _NUMBERS_BY_X.fullmatch(body) else body.split(",")
    dims: list[DimValue] = []
    for part in parts:
        try:
            dim = symdim.parse(part)
        except (ValueError, ZeroDivisionError, RecursionError):
            hint = " (x separates numbers only: write 2,seq)" if "x" in part else ""
            raise UsageError(f"--input-shape {_shown(spec)}: {_shown(part.strip())} is not a dim{hint}") from None
        if isinstance(dim, int) and dim < 0:
            raise UsageError(f"--input-shape {_shown(spec)}: a dim is negative")
        dims.append(_bounded(dim, spec))
    return dims


def _shown(text: str, limit: int = 60) -> str:
    """``text`` quoted for a message, its middle left out past ``limit`` characters."""
    return repr(text if len(text) <= limit else f"{text[:limit // 2]}...{text[-limit // 2:]}")


def _put(into: dict[str, Any], name: str, value: Any, spec: str) -> None:
    if name in into and into[name] != value:
        raise UsageError(f"--input-shape {_shown(spec)}: {name!r} is already given another value")
    into[name] = value


#: Input shapes as callers give them: parsed ``--input-shape`` values, or a mapping
#: ``{"input_ids": (1, 128), "batch": 2}`` (dims as ints or expressions)
ShapeSpec = InputShapes | Mapping[str, Any]


def as_input_shapes(value: InputShapes | str | Iterable[str] | Mapping[str, Any] | None) -> InputShapes:
    """Input shapes from what the library accepts: :class:`InputShapes`, ``--input-shape`` strings, or a mapping
    (a sequence of dims, ints or expressions, for an input; a non-negative int for a symbol)."""
    if value is None:
        return InputShapes()
    if isinstance(value, InputShapes):
        return value
    if isinstance(value, str):
        return parse_input_shapes([value])
    if not isinstance(value, Mapping):
        return parse_input_shapes(list(value))
    result = InputShapes()
    for name, given in value.items():
        if isinstance(given, (str, bytes)) or not hasattr(given, "__len__"):
            result.bindings[str(name)] = _size(name, given)
        else:
            result.shapes[str(name)] = [_dim(name, d) for d in given]
    return result


def _size(name: object, value: object) -> int:
    try:
        size = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        size = -1
    if isinstance(value, bool) or size < 0:
        raise UsageError(f"bad input shape for {name!r}: a size must be a non-negative integer, got {value!r}")
    _bounded(size, f"{name}={size}")
    return size


def _dim(name: object, value: object) -> DimValue:
    if isinstance(value, symdim.Expr):
        return _bounded(value, f"{name}:{symdim.text(value)}")
    if isinstance(value, str):
        try:
            return _bounded(symdim.parse(value), f"{name}:{value}")
        except (ValueError, ZeroDivisionError, RecursionError):
            raise UsageError(f"bad input shape for {name!r}: {value!r} is not a dim") from None
    return _size(name, value)


def check_names(given: InputShapes, inputs: Collection[str], symbols: Collection[str]) -> None:
    """:class:`UsageError` unless every name ``given`` uses is a model input (for a shape) or a symbol (for a
    size): the model's (``symbols``) or one the given shapes introduce."""
    known_symbols = set(symbols) | given.symbols()
    for name in given.shapes:
        if name not in inputs:
            _unknown(name, "input", inputs, known_symbols)
    for name in given.bindings:
        if name not in known_symbols:
            _unknown(name, "symbol", inputs, known_symbols)


def check_declared(given: InputShapes, inputs: Iterable[onnx.ValueInfoProto]) -> None:
    """:class:`UsageError` when a whole shape given for one of ``inputs`` has another rank than the input declares,
    or changes one of its static dims (what validation refuses too: the model could not take such an input)."""
    for value_info in inputs:
        dims = given.shapes.get(value_info.name)
        tensor_type = value_info.type.tensor_type
        if dims is None or not value_info.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
            continue
        declared = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else d.dim_param or "?"
                    for d in tensor_type.shape.dim]
        shown = f"--input-shape {value_info.name}:{','.join(map(symdim.text, dims)) or '[]'}"
        what = f"input {value_info.name!r} [{', '.join(map(str, declared))}]"
        if len(declared) != len(dims):
            raise UsageError(f"{shown}: {what} has rank {len(declared)}, not {len(dims)}")
        for axis, (fixed, dim) in enumerate(zip(declared, dims, strict=True)):
            if isinstance(fixed, int) and _size_or_none(dim, given.bindings) != fixed:
                raise UsageError(f"{shown}: dim {axis} of {what} is fixed at {fixed}, not {symdim.text(dim)}")


def _size_or_none(dim: DimValue, bindings: Mapping[str, int]) -> int | None:
    try:
        return symdim.evaluate(dim, bindings)
    except KeyError:
        return None


def _unknown(name: str, kind: str, inputs: Collection[str], symbols: Collection[str]) -> None:
    if kind == "input" and name in symbols:
        raise UsageError(f"--input-shape {name}: {name!r} is a symbol: give its size ({name}=N)")
    if kind == "symbol" and name in inputs:
        raise UsageError(f"--input-shape {name}: {name!r} is an input: give its shape ({name}:2x16)")
    candidates = sorted(inputs) if kind == "input" else sorted(symbols)
    shown = candidates if kind == "input" else [c for c in candidates if c.isidentifier()]  # not Min(32, seq)
    listed = ", ".join(shown[:20]) + (", ..." if len(shown) > 20 else "") or "none"
    what, plural = ("an input", "inputs") if kind == "input" else ("a symbol", "symbols")
    raise UsageError(f"--input-shape names {name!r}, which is not {what} of the model{did_you_mean(name, candidates)}; "
                     f"its {plural}: {listed}")


def model_symbols(model: onnx.ModelProto) -> set[str]:
    """The symbols of ``model``'s main graph: the ``dim_param`` names (and the symbols of those that are
    expressions, ``past + seq``) of its inputs, outputs and declared value types."""
    graph = model.graph
    found: set[str] = set()
    for value_info in (*graph.input, *graph.output, *graph.value_info):
        if not value_info.type.HasField("tensor_type"):
            continue
        for dim in value_info.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param:
                found.add(dim.dim_param)
                found |= symdim.symbols(symdim.from_dim_param(dim.dim_param))
    return found
