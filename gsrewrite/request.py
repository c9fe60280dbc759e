"""The request: one call of an entry (``optimize``, ``apply``, ``simplify``, ``compress``) as one object.

A :class:`Request` holds what the call works in besides its arguments: the model handle (a
:class:`~gsrewrite.model_io.source.Source`: the model, the file it came from, the folder its weights stay in),
the entry's options, the scratch space its payloads wait in (:mod:`gsrewrite.model_io.scratch`), the stage timer's
unit (the weight bytes the ``-v`` stage lines measure memory against: :mod:`gsrewrite.stages`), the report sink
(the :class:`~gsrewrite.model_io.staging.StagedSave` that writes the validated bytes while onnxruntime checks
them), the memory budget of the validation running, and whether an unvalidated step sits inside a validated one.
An entry makes it once (:func:`gsrewrite.pipelines.request.entered`) and hands it down to its own steps as a
parameter.

Code far below the entries reads it too: the graph importer and exporter (the weights' folder, the scratch file),
the tensor reader, the save, the stage lines, validation's generated values. They run inside calls that take no
request parameter (onnx-graphsurgeon's export, a pass's ``run(graph)``, a plugin's strategy, onnxruntime's
session factory), so threading one through every signature between would touch every pass and plugin: they call
:func:`current`. That is the one context variable of a request (nothing process-wide: a request in another thread,
or a copied context, sees its own). Its value is immutable; :func:`bound` puts a copy with some fields changed in
place for a block (a nested request, a save opened by the CLI before the call, a validation's budget) and puts
the previous one back after it. The mutable pieces (the scratch file) are shared by the copies.

This module imports nothing of gsrewrite: it sits below every layer that reads it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    """What one call works in (see the module doc). Every field may be unset: a function called outside any
    entry (a library user's ``validate``, a test) sees the empty request."""

    #: the model handle (a :class:`~gsrewrite.model_io.source.Source`)
    source: Any = None
    #: the entry's own options (its settings, validation's keyword arguments), as the entry groups them
    options: Any = None
    #: the folder the model's weight references are relative to (a model read weightless), if any
    weights_dir: str | None = None
    #: the scratch file the payloads a rewrite makes wait in (:class:`~gsrewrite.model_io.scratch.Scratch`); bound
    #: with ``weights_dir``
    scratch: Any = None
    #: the stage timer's unit: the request's weight bytes (None: no ratio in the stage lines)
    weight_bytes: int | None = None
    #: the report sink: the save begun while the result is validated (a
    #: :class:`~gsrewrite.model_io.staging.StagedSave`), when the caller opened one
    output: Any = None
    #: the memory budget of the validation running (``--max-memory``), when one runs
    memory_budget: int | None = None
    #: inside an unvalidated step of a call that validates at its end (``optimize``'s cleanup): no warning
    inner_step: bool = False
    #: called whenever a simplify pass changed something (``optimize``/``simplify`` start the reference run then)
    on_change: Callable[[], None] | None = None


_EMPTY = Request()
#: the request of this context (see the module doc for why a context variable)
_CURRENT: ContextVar[Request] = ContextVar("gsrewrite_request", default=_EMPTY)


def current() -> Request:
    """The request this code runs in (the empty :class:`Request` outside every entry)."""
    return _CURRENT.get()


@contextlib.contextmanager
def bound(**changes: Any) -> Iterator[Request]:
    """Within this block, :func:`current` is the current request with ``changes`` (field names of
    :class:`Request`); after it, the request before."""
    request = dataclasses.replace(_CURRENT.get(), **changes)
    token = _CURRENT.set(request)
    try:
        yield request
    finally:
        _CURRENT.reset(token)
