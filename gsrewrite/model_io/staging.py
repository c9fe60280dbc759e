"""A save begun while the result is still being validated: :class:`StagedSave`.

Validation serializes each candidate for onnxruntime; writing a new multi-megabyte file is kernel time
(page-cache allocation) during which Python holds no lock, and onnxruntime's run of the candidate takes a while.
Inside ``with StagedSave(path, ...) as output:`` the bytes of the first candidate a pipeline validates
(:func:`offer`, called by the validate-and-bisect loop) are written to a temp file next to ``path`` on a worker
thread; ``output.save(model, serialized)`` puts that file in place when the result is exactly those bytes, and
otherwise discards it and saves through :func:`~gsrewrite.model_io.save_model`, the one save path. What it saves
is measured in docs/design.md ("Performance").

The staged save is the request's report sink (``output``, :mod:`gsrewrite.request`): a pipeline hands bytes down to
this layer, it never calls back into the code that opened the save (the CLI), and outside a ``with StagedSave``
:func:`offer` does nothing.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

import onnx

from gsrewrite.model_io.saving import PendingFile, check_output_path, save_model, write_error, writes_as_is
from gsrewrite.request import bound, current


def offer(model: onnx.ModelProto, data: bytes) -> None:
    """``data`` (``model`` serialized, about to be validated): written ahead by the :class:`StagedSave` open in
    this context, if any."""
    staged = current().output
    if staged is not None:
        staged.begin(model, data)


class StagedSave:
    """Saving a command's result to ``path``, begun while onnxruntime still checks it; ``save_options`` are
    :func:`~gsrewrite.model_io.save_model`'s. The output is never touched by anything but the final result: a temp
    file not put in place (an error, a failed validation, another result) is removed when the block ends."""

    def __init__(self, path: str | os.PathLike[str], **save_options: Any) -> None:
        self._path, self._options = os.fspath(path), save_options
        self._data: bytes | None = None
        self._pending: PendingFile | None = None
        self._writer: _Worker | None = None
        self._error: OSError | None = None
        self._binding = contextlib.ExitStack()

    def begin(self, model: onnx.ModelProto, data: bytes) -> None:
        """Start writing ``data`` unless something is staged already or :func:`save_model` would not write these
        bytes as they are (external data, an IR version to lower)."""
        if self._pending is not None or not writes_as_is(model, data, self._options.get("external_data")):
            return
        target = check_output_path(self._path, input_path=self._options.get("input_path"),
                                   in_place=self._options.get("in_place", False))
        try:
            self._pending = PendingFile(target)
        except OSError:  # the final save reports it
            return
        self._data = data
        self._writer = _Worker(self._write, "gsrewrite-staged-save")

    def _write(self) -> None:
        assert self._pending is not None and self._data is not None
        try:
            self._pending.file.write(self._data)
            # replacing a file: commit() syncs before the rename; syncing here does it while validation runs
            self._pending.flush(fsync=os.path.exists(self._pending.target))
        except OSError as exc:  # raised by save() in the caller's thread
            self._error = exc

    def save(self, model: onnx.ModelProto, serialized: bytes | None = None, weights_dir: str | None = None) -> int:
        """Save ``model`` (``serialized``: its bytes, when validation serialized it; ``weights_dir``: the folder its
        weight references are relative to, see :func:`~gsrewrite.model_io.save_model`); the bytes written."""
        if self._pending is None or self._data is None or serialized is not self._data:
            self._discard()
            return save_model(model, self._path, serialized=serialized, weights_dir=weights_dir, **self._options)
        assert self._writer is not None
        self._writer.wait()
        try:
            if self._error is not None:
                raise self._error
            self._pending.commit()
        except OSError as exc:
            self._discard()
            raise write_error(exc, self._path) from exc
        self._pending = None
        return len(self._data)

    def _discard(self) -> None:
        if self._writer is not None:
            self._writer.wait()
        if self._pending is not None:
            self._pending.discard()
        self._pending = self._writer = None

    def __enter__(self) -> StagedSave:
        self._binding.enter_context(bound(output=self))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._binding.close()
        self._discard()


class _Worker:
    """A thread that can be waited for again after an interrupt.

    Not ``Thread.join``: a join interrupted by a signal handler's exception (Ctrl-C, SIGTERM) marks the thread
    finished while it still runs (CPython 3.11 ``_wait_for_tstate_lock``), so neither a second join nor the
    interpreter's exit waits for it, and the save is cut short with its temp file left behind.
    """

    def __init__(self, target: Callable[[], None], name: str) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(target,), name=name)
        self._thread.start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        finally:
            self._done.set()

    def wait(self) -> None:
        self._done.wait()
