"""One onnxruntime run under gsrewrite's rules: a time limit (``GSREWRITE_RUN_TIMEOUT``) and an immediate stop on
Ctrl-C or SIGTERM, for the sessions of :mod:`gsrewrite.validation.runner` (:func:`limited_run`) and for those a
library makes itself while gsrewrite calls it (:func:`time_limited_runs`: onnxruntime's quantizer calibrating).

The run goes to a worker thread and the calling thread waits for it: a thread blocked in onnxruntime's native code
runs no Python signal handler, so a run in the main thread could not be interrupted (SIGTERM waited for the time
limit, 600 s by default). The time limit and a signal both set onnxruntime's ``RunOptions.terminate``, which
onnxruntime checks between kernels (and between a Loop's iterations).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from gsrewrite.errors import CannotValidateError

#: Environment variable: seconds one onnxruntime run may take, anywhere (validation, bench, the shape check,
#: calibration, ...; default :data:`DEFAULT_RUN_TIMEOUT`); a run that takes longer (a Loop with 2**62 trips) is
#: stopped, and the command fails with one line (exit 2).
RUN_TIMEOUT_ENV = "GSREWRITE_RUN_TIMEOUT"
DEFAULT_RUN_TIMEOUT = 600.0


def run_time_limit() -> float:
    """Seconds one onnxruntime run may take (:data:`RUN_TIMEOUT_ENV`, else :data:`DEFAULT_RUN_TIMEOUT`)."""
    try:
        value = float(os.environ.get(RUN_TIMEOUT_ENV, DEFAULT_RUN_TIMEOUT))
    except ValueError:
        return DEFAULT_RUN_TIMEOUT
    return value if 0 < value < float("inf") else DEFAULT_RUN_TIMEOUT


def _quiet_run() -> Any:
    """Run options without onnxruntime's own error log: a failure is raised, and reported, by the caller."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


#: seconds between two looks for a signal while a run goes on
_SIGNAL_POLL_S = 0.1


class RunTimeLimitError(CannotValidateError):
    """An onnxruntime run took longer than :func:`run_time_limit` and was stopped."""


def limited_run(call: Callable[[Any], Any], what: str) -> tuple[Any, float]:
    """``call(run_options)`` (one onnxruntime run) and onnxruntime's seconds for it, stopped through
    ``run_options.terminate`` after :func:`run_time_limit` seconds (:class:`RunTimeLimitError`, naming ``what``)
    or when the calling thread is interrupted (Ctrl-C, SIGTERM: raised once the run has stopped).

    The worker thread costs no more than the timer thread it replaced; ``seconds`` is onnxruntime's own time,
    without it.
    """
    options = _quiet_run()
    limit = run_time_limit()
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        start = time.perf_counter()
        try:
            outcome["value"] = call(options)
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc
        finally:
            outcome["seconds"] = time.perf_counter() - start
            done.set()

    # waited for through an Event, not Thread.join: CPython 3.11's join, interrupted by a signal, marks a thread
    # that is still running as stopped (and the process then ended with onnxruntime still running: abort)
    worker = threading.Thread(target=work, name="gsrewrite-onnxruntime-run", daemon=True)
    deadline = time.monotonic() + limit
    try:
        worker.start()
        # short waits: a signal the OS hands to another thread (onnxruntime's pool, the worker) does not wake
        # this one, but its handler runs here at the end of the wait it fell in
        while not done.wait(min(_SIGNAL_POLL_S, max(deadline - time.monotonic(), 0.0))) \
                and time.monotonic() < deadline:
            pass
    finally:  # out of time, or interrupted while waiting: stop the run and wait for onnxruntime to let go
        timed_out = not done.is_set()
        if timed_out:
            options.terminate = True
            while worker.ident is not None and not done.wait(_SIGNAL_POLL_S):  # ident: the thread started
                pass
    if "error" in outcome:
        if timed_out:
            raise RunTimeLimitError(f"{what} ran longer than {limit:g} s in onnxruntime and was stopped "
                                    f"({RUN_TIMEOUT_ENV}=SECONDS sets the limit)")
        raise outcome["error"]
    return outcome["value"], outcome["seconds"]


_patch_lock = threading.Lock()
_patch_depth = 0


@contextlib.contextmanager
def time_limited_runs(what: str = "a model") -> Iterator[None]:
    """Within: every onnxruntime run that brings no ``RunOptions`` of its own (a library's: onnxruntime's
    quantizer calibrating a model, a plugin's session) runs as :meth:`Session.run` does, under
    :func:`run_time_limit` and stopped by Ctrl-C; on the limit it raises :class:`RunTimeLimitError` naming
    ``what`` (the outermost block's).

    ``InferenceSession.run`` is wrapped for the block (in every thread: a run elsewhere that brings no options gets
    the limit too, which is what gsrewrite wants of every run) and restored after the outermost block."""
    import onnxruntime as ort

    global _patch_depth
    cls = ort.InferenceSession
    with _patch_lock:
        if _patch_depth == 0:
            original = cls.run
            own = "run" in cls.__dict__  # else inherited (from onnxruntime's Session): deleted afterwards

            def run(self: Any, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
                if run_options is not None:
                    return original(self, output_names, input_feed, run_options)
                return limited_run(lambda options: original(self, output_names, input_feed, options), what)[0]

            run.restore = (original if own else None)  # type: ignore[attr-defined]
            cls.run = run  # type: ignore[method-assign]
        _patch_depth += 1
    try:
        yield
    finally:
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                restore = cls.run.restore  # type: ignore[attr-defined]
                if restore is None:
                    del cls.run
                else:
                    cls.run = restore  # type: ignore[method-assign]
