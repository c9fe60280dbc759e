"""Write the output file on a worker thread while the caller's thread validates the result or builds the report.

Writing a new multi-megabyte file is kernel time (page-cache allocation: ~15 ms for 8 MB on the test VM) during
which Python holds no lock; so are onnxruntime's session for the result and its run, and the statistics of the
before/after table are Python work on the model protos. :class:`StagedSave` starts writing the result's bytes to
a temp file as soon as validation has serialized them, and puts the file in place only once the command's result
is exactly those bytes; the report is printed only once the file is in place (or the write's error is raised).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import onnx

from gsrewrite.errors import OutputError

T = TypeVar("T")


def save_while(work: Callable[[], T], model: Any, output: str, **save_options: Any) -> tuple[int, T]:
    """``(save_model(model, output, **save_options), work())``, the save on a worker thread."""
    from gsrewrite.model_io import save_model

    outcome: dict[str, Any] = {}

    def save() -> None:
        try:
            outcome["size"] = save_model(model, output, **save_options)
        except BaseException as exc:  # raised in the caller's thread below
            outcome["error"] = exc

    worker = _Worker(save, "gsrewrite-save")
    try:
        value = work()
    finally:
        worker.wait()  # after an interrupt too: the save, cancelled, removes its temp files first
    if "error" in outcome:
        raise outcome["error"]
    return outcome["size"], value


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


class StagedSave:
    """Saving a validated command's result, begun while onnxruntime still checks it.

    :meth:`begin` is the library's ``on_serialized`` callback: it starts writing the first candidate's bytes to a
    temp file next to ``output`` on a worker thread. :meth:`finish` puts that file in place when the result is
    exactly those bytes (validation passed on them), else discards it and saves the result as ``save_model``
    would. As a context manager it removes a temp file that was not put in place (an error, a failed
    validation): the output is never touched by anything but the final result. ``save_options`` are
    :func:`~gsrewrite.model_io.save_model`'s.
    """

    def __init__(self, output: str, **save_options: Any) -> None:
        self._output, self._options = output, save_options
        self._data: bytes | None = None
        self._pending: Any = None
        self._writer: _Worker | None = None
        self._error: OSError | None = None

    def begin(self, model: onnx.ModelProto, data: bytes) -> None:
        """Start writing ``data`` (``model`` serialized) unless something is staged already or ``save_model``
        would not write these bytes as they are (external data, an IR version to lower)."""
        from gsrewrite.model_io.saving import PendingFile, check_output_path, writes_as_is

        if self._pending is not None or not writes_as_is(model, data, self._options.get("external_data")):
            return
        target = check_output_path(self._output, input_path=self._options.get("input_path"),
                                   in_place=self._options.get("in_place", False))
        try:
            self._pending = PendingFile(target)
        except OSError:  # the final save reports it
            return
        self._data = data
        self._writer = _Worker(self._write, "gsrewrite-staged-save")

    def _write(self) -> None:
        import os

        try:
            self._pending.file.write(self._data)
            # replacing a file: commit() syncs before the rename; syncing here does it while validation runs
            self._pending.flush(fsync=os.path.exists(self._pending.target))
        except OSError as exc:  # raised by finish() in the caller's thread
            self._error = exc

    def finish(self, model: onnx.ModelProto, serialized: bytes | None, work: Callable[[], T]) -> tuple[int, T]:
        """Save ``model`` (``serialized``: its bytes, if known) while ``work()`` runs; ``(bytes written, value)``."""
        if self._pending is None or serialized is not self._data:
            self._discard()
            return save_while(work, model, self._output, serialized=serialized, **self._options)
        value = work()
        assert self._writer is not None and self._data is not None
        self._writer.wait()
        try:
            if self._error is not None:
                raise self._error
            self._pending.commit()
        except OSError as exc:
            self._discard()
            raise OutputError(f"cannot write '{self._output}': {exc.strerror or exc}") from exc
        self._pending = None
        return len(self._data), value

    def _discard(self) -> None:
        if self._writer is not None:
            self._writer.wait()
        if self._pending is not None:
            self._pending.discard()
        self._pending = self._writer = None

    def __enter__(self) -> StagedSave:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._discard()
