"""A :class:`~gsrewrite.validation.Validator` prepared on a worker thread while the caller rewrites.

Preparing a validator means creating an onnxruntime session for the original model and running it on every
input set. onnxruntime releases the GIL while it builds and runs sessions, so doing that on a thread overlaps
it with the Python-heavy rewriting that has to happen anyway: a validated rewrite then costs little more
than an unvalidated one. Errors (the original cannot run, the given inputs do not fit) are raised by
:meth:`BackgroundValidator.get`, in the caller's thread, exactly as ``Validator(...)`` would raise them.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import onnx

from gsrewrite.errors import CannotValidateError
from gsrewrite.validation.runner import ModelArg, check_runnable, serialized_source
from gsrewrite.validation.validator import Validator

log = logging.getLogger(__name__)


class BackgroundValidator:
    """``Validator(original, **options)``, started now on a worker thread; :meth:`get` waits for it."""

    def __init__(self, original: ModelArg, **options: Any) -> None:
        if isinstance(original, onnx.ModelProto):
            # serialize here: on the worker it would hold the GIL in turns with the caller's rewriting
            original = serialized_source(original, "original")
        self._validator: Validator | None = None
        self._error: BaseException | None = None
        # not a daemon: onnxruntime must not be running native code while the interpreter shuts down
        self._thread = threading.Thread(target=self._prepare, args=(original, options),
                                        name="gsrewrite-reference-run")
        self._thread.start()

    def _prepare(self, original: ModelArg, options: dict[str, Any]) -> None:
        try:
            self._validator = Validator(original, **options)
        except BaseException as exc:  # handed to the caller's thread by get()
            self._error = exc

    def join(self) -> None:
        """Wait for the worker without taking its result (for a caller that no longer needs it)."""
        self._thread.join()

    @property
    def error(self) -> BaseException | None:
        """What ``Validator(...)`` raised on the worker, once it is done (``None`` if nothing)."""
        return self._error

    def get(self) -> Validator:
        """The prepared validator (waits for the worker); raises what ``Validator(...)`` raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._validator is not None
        return self._validator


class LazyValidator:
    """A :class:`BackgroundValidator` started at the first :meth:`start` (or :meth:`get`): a caller that may find
    nothing to compare (a model nothing changed) never pays for the reference run."""

    def __init__(self, original: ModelArg, **options: Any) -> None:
        self._original, self._options = original, options
        self._running: BackgroundValidator | None = None

    @property
    def started(self) -> bool:
        return self._running is not None

    def start(self) -> LazyValidator:
        """Start the reference run on a worker thread (once); returns ``self``."""
        if self._running is None:
            self._running = BackgroundValidator(self._original, **self._options)
        return self

    def join(self) -> None:
        """Wait for the reference run, if started, without taking its result."""
        if self._running is not None:
            self._running.join()

    def get(self) -> Validator:
        """The prepared validator (starting the run if nobody did); raises what ``Validator(...)`` raised."""
        return self.start()._running.get()  # type: ignore[union-attr]

    def ensure_runnable(self) -> None:
        """For a model nothing changed (nothing to compare): raise :class:`CannotValidateError` when onnxruntime
        cannot run the original. A started reference run is awaited (only that error is raised from it);
        otherwise only the original's session is created."""
        if self._running is None:
            check_runnable(self._original, self._options.get("providers"))
            return
        self._running.join()
        if isinstance(self._running.error, CannotValidateError):
            raise self._running.error
