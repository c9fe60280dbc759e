"""One onnxruntime run under gsrewrite's rules: a time limit (``GSREWRITE_RUN_TIMEOUT``) and an immediate stop on
Ctrl-C or SIGTERM, for the sessions of :mod:`gsrewrite.validation.runner` (:func:`limited_run`) and for those a
library makes itself while gsrewrite calls it (:func:`time_limited_runs`: onnxruntime's quantizer calibrating; only
the sessions the calling thread creates within, never onnxruntime's class).

The run goes to a worker thread and the calling thread waits for it: a thread blocked in onnxruntime's native code
runs no Python signal handler, so a run in the main thread could not be interrupted (SIGTERM waited for the time
limit, 600 s by default). The time limit and a signal both set onnxruntime's ``RunOptions.terminate``, which
onnxruntime checks between kernels (and between a Loop's iterations).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

from gsrewrite.errors import CannotValidateError

log = logging.getLogger(__name__)

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
    # the error is taken out of ``outcome`` and dropped once raised: its traceback holds the worker's frame, whose
    # closure holds ``outcome`` (a cycle that would keep the session, and its native memory, until the next
    # garbage collection)
    error = outcome.pop("error", None)
    if error is not None:
        try:
            if timed_out:
                raise RunTimeLimitError(f"{what} ran longer than {limit:g} s in onnxruntime and was stopped "
                                        f"({RUN_TIMEOUT_ENV}=SECONDS sets the limit)")
            raise error
        finally:
            del error
    return outcome["value"], outcome["seconds"]


#: per thread: the ``what`` of each open :func:`time_limited_runs` block, innermost last
_blocks = threading.local()


@contextlib.contextmanager
def time_limited_runs(what: str = "a model") -> Iterator[None]:
    """Within, in the calling thread: every onnxruntime ``InferenceSession`` created (a library's: onnxruntime's
    quantizer calibrating a model, a plugin's session) runs as :meth:`Session.run` does when its caller brings no
    ``RunOptions`` of its own: under :func:`run_time_limit` and stopped by Ctrl-C; on the limit it raises
    :class:`RunTimeLimitError` naming ``what`` (that of the innermost block open when the session was created).

    Only those sessions: ``InferenceSession`` itself is left alone, so a session the application embedding
    gsrewrite creates in another thread meanwhile keeps onnxruntime's own ``run``. The sessions are found as they
    are made: a profile function (``sys.setprofile``, which is per thread) sees ``InferenceSession.__init__``
    return and gives that instance a ``run`` of its own; it is removed after the thread's outermost block. A
    session keeps its limit after the block. Not covered: sessions a library creates in threads of its own, and,
    when the thread already has a profile function (a profiler running), every session: the profiler is kept."""
    import onnxruntime as ort

    stack: list[str] | None = getattr(_blocks, "stack", None)
    if stack is None:
        stack = _blocks.stack = []
    installed = None
    if not stack:
        if sys.getprofile() is None:
            installed = _watch_sessions(ort.InferenceSession.__init__.__code__, stack)
            sys.setprofile(installed)
        else:
            log.debug("a profiler is active in this thread: the sessions made while %s is computed have no run "
                      "time limit", what)
    stack.append(what)
    try:
        yield
    finally:
        stack.pop()
        if installed is not None and sys.getprofile() is installed:
            sys.setprofile(None)


def _watch_sessions(init: CodeType, stack: list[str]) -> Callable[[FrameType, str, Any], None]:
    """The profile function: when ``init`` (``InferenceSession.__init__``) returns, limit that session's runs."""

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        if frame.f_code is init and event == "return" and stack:
            session = frame.f_locals.get("self")
            if session is not None:
                limit_runs(session, stack[-1])

    return watch


def limit_runs(session: Any, what: str) -> None:
    """Give ``session`` (an onnxruntime ``InferenceSession``) a ``run`` that, called without ``RunOptions``, runs
    under :func:`limited_run`; the class's ``run`` is not touched. The instance is held weakly (a reference cycle
    would keep the session's native memory until the next garbage collection)."""
    method = type(session).run
    ref = weakref.ref(session)

    def run(output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        own = ref()
        if run_options is not None:
            return method(own, output_names, input_feed, run_options)
        return limited_run(lambda options: method(own, output_names, input_feed, options), what)[0]

    session.run = run
