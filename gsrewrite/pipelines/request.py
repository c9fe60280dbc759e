"""The request of one entry call (``optimize``, ``apply``, ``simplify``, ``compress``): made once where the call
enters, handed down to its steps, ended with the call.

:func:`entered` reads the model into its handle (:class:`~gsrewrite.model_io.source.Source`) and makes the
:class:`~gsrewrite.request.Request` the call works in: the handle, the entry's validation options, the folder its
weights stay in and the scratch file the payloads it makes wait in (a model read weightless), the stage lines' unit
(its weight bytes). It keeps what an enclosing request or the caller bound (a ``StagedSave`` the CLI opened, the
scratch file of an ``optimize`` that runs ``compress``) and removes the scratch file it made when the call ends,
however it ends. :func:`handed_back` is the call's last step: what the request made is put back into the result's
model (no reference to the scratch file leaves the call) and the result says which folder its weights stay in.

When the reference run starts is decided here too (:func:`overlapped`): for a small model, beside the work, at once
when the work is likely to change the model, else when a pass first changes it (the request's ``on_change``); for a
larger one, and when nothing changes, at the first comparison (a ``LazyValidator`` starts when first asked: a model
nothing changes never pays for a reference run).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from gsrewrite.model_io.scratch import Scratch
from gsrewrite.model_io.source import ModelArg, Source
from gsrewrite.model_io.weights import has_references, inlined
from gsrewrite.request import Request, bound, current

#: weights up to which the reference run overlaps the cleanup and the rewrite: it made small models 3-10% faster
#: (benchmarks/results/performance_notes_history.md); at BERT-base width it saved no wall time (A/B 0.95, 9 pairs)
#: but its mapped weights beside the rewrite's working set raised optimize's median peak 360 -> 404 MiB
#: (benchmarks/results/pipeline_memory.md)
OVERLAP_MAX_WEIGHT_BYTES = 64 << 20


@contextlib.contextmanager
def entered(model: ModelArg, options: dict[str, Any] | None = None) -> Iterator[Request]:
    """The request of one entry call on ``model`` (a proto, a path read whole, or a handle), bound for the block;
    ``options``: the entry's validation keyword arguments (None: not validated)."""
    source = Source.of(model)
    fields: dict[str, Any] = {"source": source, "options": options, "weight_bytes": source.weight_bytes()}
    made = None
    if source.weights_dir is not None:  # weights stay in their files; what the request makes waits in a scratch file
        fields["weights_dir"] = source.weights_dir
        if current().scratch is None:  # an enclosing request's file is shared
            made = fields["scratch"] = Scratch()
    try:
        with bound(**fields) as request:
            yield request
    finally:
        if made is not None:
            made.close()


def handed_back(request: Request, result: Any, *, only_with_references: bool = False) -> Any:
    """``result`` (any entry's: it has ``model`` and ``weights_dir``) as the call returns it: the payloads the
    request made put back into the model (out of the scratch file that ends with the request), and the folder the
    model's remaining references are relative to (``only_with_references``: None when there are none)."""
    inlined(result.model)
    folder = request.source.weights_dir
    result.weights_dir = None if only_with_references and not has_references(result.model) else folder
    return result


def overlaps_reference(source: Source) -> bool:
    """Whether the reference run may work beside the cleanup and the rewrite (a worker thread): for models of at
    most :data:`OVERLAP_MAX_WEIGHT_BYTES`; a larger one's reference session (its weights mapped) then never coexists
    with the rewrite's working set, and starts at the first comparison."""
    return source.weight_bytes() <= OVERLAP_MAX_WEIGHT_BYTES


def overlapped(request: Request, reference: Any, likely_to_change: bool) -> Request:
    """``request`` with the start of its ``reference`` run (a not yet started ``LazyValidator`` or ``Checker``, or
    None: not validated) as its ``on_change``, and the run started now when ``likely_to_change``, if the model is
    small enough to overlap (:func:`overlaps_reference`); ``request`` itself otherwise: the run then starts at the
    first comparison."""
    if reference is None or not overlaps_reference(request.source):
        return request
    if likely_to_change:
        reference.start()  # at once: the reference run overlaps all of the work
    return dataclasses.replace(request, on_change=reference.start)
