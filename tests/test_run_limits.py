"""No hangs, no bombs, no exit 3 (issue 24, item 3), through the installed console script in a subprocess capped
at 4 GiB of address space (tests/hostile/runner.py's jail):

- a signal stops an onnxruntime run at once (a Loop of 2**40 trips; the run time limit is left at its default of
  600 s): exit 130/143 and one line, not after the time limit, and no abort at exit;
- every compression strategy refuses a model whose local functions expand to 2**30 nodes before it starts (fp16 and
  dynamic-int8 ran onnx's shape inference on it for minutes);
- an ``.npz`` that really inflates past the memory budget is refused from its headers, before anything is inflated,
  wherever the user names one (``--inputs``, ``--calibration``);
- a MemoryError is one line and exit 2, not "internal error" and exit 3.

The hostile corpus (tests/hostile/data_files.py) covers the other data files: named pipes, devices, huge headers,
pickles, a calibration set the model loops on.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hostile.data_files import inflating_npz, npy_stream, npz_bytes
from hostile.runner import GSREWRITE, HANG_GUARD_S, Measured, limit_address_space, measured_run
from onnx import TensorProto, helper, numpy_helper


def _vi(name: str, shape: list[int], elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _save(folder: Path, graph: onnx.GraphProto, name: str = "m.onnx", **kwargs: object) -> Path:
    model = helper.make_model(graph, ir_version=8, **kwargs)
    if not kwargs.get("opset_imports"):
        del model.opset_import[:]
        model.opset_import.append(helper.make_opsetid("", 17))
    onnx.save(model, folder / name)
    return folder / name


def _loop_model(folder: Path) -> Path:
    """y = x + 1, 2**40 times (a Loop with a constant trip count whose condition, i < 2**40, the body computes: a
    loop gsrewrite cannot tell will not end early, so it is run rather than refused from the graph)."""
    nodes = [helper.make_node("Less", ["i", "n"], ["c2"]), helper.make_node("Add", ["v", "one"], ["w"])]
    body = helper.make_graph(nodes, "body",
                             [_vi("i", [], TensorProto.INT64), _vi("c", [], TensorProto.BOOL), _vi("v", [])],
                             [_vi("c2", [], TensorProto.BOOL), _vi("w", [])])
    inits = [numpy_helper.from_array(np.array(2**40, np.int64), "n"), numpy_helper.from_array(np.array(True), "t"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    graph = helper.make_graph([helper.make_node("Loop", ["n", "t", "x"], ["y"], body=body)], "g", [_vi("x", [])],
                              [_vi("y", [])], inits)
    return _save(folder, graph)


def _matmul_model(folder: Path) -> Path:
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [_vi("x", [1, 4])],
                              [_vi("y", [1, 4])], [w])
    return _save(folder, graph)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GSREWRITE_")}  # the default run time limit


def _jailed(*args: str | Path, cwd: Path) -> Measured:
    done = measured_run([GSREWRITE, *args], cwd=cwd, env=_env(), preexec_fn=limit_address_space)
    assert not done.hung, done.stderr
    return done


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize(("command", "signum", "code", "line"), [
    (["validate", "m.onnx", "m.onnx"], signal.SIGTERM, 143, "terminated"),
    (["bench", "m.onnx"], signal.SIGINT, 130, "interrupted"),
])
def test_a_signal_stops_an_onnxruntime_run_at_once(tmp_path: Path, command: list[str], signum: int, code: int,
                                                     line: str) -> None:
    """Before: the run went on in native code (no Python signal handler runs there) until the 600 s limit; a
    signal that another thread received did not wake the waiting thread either."""
    _loop_model(tmp_path)
    process = subprocess.Popen([str(GSREWRITE), "-vv", *command], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                               env=_env(), stdin=subprocess.DEVNULL, preexec_fn=_default_signals)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for text in process.stderr:
            lines.put(text)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # hang guards, not bounds on speed: the session exists 1-3 s after the start and the process ends well within a
    # second of the signal; only a command that hangs (or runs to the 600 s limit) meets them
    guard = threading.Timer(HANG_GUARD_S, process.kill)
    guard.start()
    try:
        while True:  # -vv logs the session's creation: the run starts right after it
            try:
                if "session created" in lines.get(timeout=1.0):
                    break
            except queue.Empty:
                assert process.poll() is None, "".join(lines.queue)  # ended (or killed by the guard) before
        time.sleep(1.0)
        assert process.poll() is None, "the run ended by itself"
        before = _cpu_seconds(process.pid)  # the run's CPU so far: it keeps a core busy
        process.send_signal(signum)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = returncode = os.waitstatus_to_exitcode(status)
    finally:
        guard.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(HANG_GUARD_S)  # the reader thread takes the last lines, up to the end of the pipe
    rest = "".join(lines.queue)
    assert returncode == code, rest  # not 134: the process did not abort under a run still going
    assert rest.strip().splitlines()[-1] == line and "terminate called" not in rest, rest
    # stopped, not run to its end (2**40 trips: hours of CPU) nor to the time limit (600 s of CPU): what the process
    # spent after the signal is the stop and the exit, not the run going on (CPU time: the same on a loaded machine)
    after = usage.ru_utime + usage.ru_stime - before
    assert after < 5, f"{after:.1f} s of CPU after the signal"


def _default_signals() -> None:
    """The child's limits, and SIGINT as a user's terminal delivers it: a suite started as a background job of a
    non-interactive shell inherits SIGINT ignored, and Python then installs no handler for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    limit_address_space()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a running process, all its threads (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _function_bomb(folder: Path) -> Path:
    """f0 calls f1 twice, ... 30 levels deep: 2**30 Relu nodes once expanded."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    functions = [helper.make_function("local", f"f{i}", ["a"], ["b"], [
        helper.make_node(f"f{i + 1}", ["a"], ["m"], domain="local"),
        helper.make_node(f"f{i + 1}", ["m"], ["b"], domain="local")], opsets) for i in range(30)]
    functions.append(helper.make_function("local", "f30", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                          opsets[:1]))
    graph = helper.make_graph([helper.make_node("f0", ["x"], ["y"], domain="local")], "g", [_vi("x", [4])],
                              [_vi("y", [4])])
    return _save(folder, graph, functions=functions, opset_imports=opsets)


@pytest.mark.parametrize("strategy", ["fp16", "dynamic-int8", "bf16", "int8", "int4", "static-int8"])
def test_every_strategy_refuses_a_function_bomb_before_it_starts(tmp_path: Path, strategy: str) -> None:
    """fp16 and dynamic-int8 hung (onnx's shape inference expanded the functions); --no-validate: the refusal
    must not depend on validation's own check."""
    _function_bomb(tmp_path)
    done = _jailed("compress", "m.onnx", "-o", "out.onnx", "-s", strategy, "--no-validate", "--bench-runs", "0",
                   cwd=tmp_path)
    assert done.returncode == 2 and "expand to more than 1,000,000 nodes" in _one_line(done.stderr), done.stderr
    assert not (tmp_path / "out.onnx").exists()
    # CPU, not wall time: the refusal costs the start-up (about 0.7 s); expanding the functions took minutes
    assert done.cpu_s < 15, done.cpu_s


@pytest.mark.parametrize("where", ["validate --inputs", "bench --inputs", "compress --calibration DIR"])
def test_an_npz_inflating_past_the_budget_is_refused_before_it_is_inflated(tmp_path: Path, where: str) -> None:
    """A 3.7 MB archive whose member inflates to 3.5 GiB (over the memory budget under the 4 GiB cap): refused from
    its headers in about the time the command takes to start. Before: inflated whole (validate: exit 2 after
    that; bench: exit 3 on the CRC; compress: a MemoryError, exit 3)."""
    _matmul_model(tmp_path)
    bomb = inflating_npz(7 << 27)
    assert len(bomb) < 4 << 20
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "a.npz").write_bytes(bomb)
    args = {"validate --inputs": ["validate", "m.onnx", "m.onnx", "--inputs", "calibration/a.npz"],
            "bench --inputs": ["bench", "m.onnx", "--inputs", "calibration/a.npz", "--runs", "1"],
            "compress --calibration DIR": ["compress", "m.onnx", "-o", "out.onnx", "-s", "static-int8",
                                           "--calibration", "calibration", "--bench-runs", "0"]}[where]
    done = _jailed(*args, cwd=tmp_path)
    assert done.returncode == 2 and "over the memory budget" in _one_line(done.stderr), done.stderr
    assert "nothing was read" in done.stderr, done.stderr
    # nothing inflated: the peak stays far below the member's 3.5 GiB (it counts this process's size at the fork),
    # and the CPU is the start-up's (about 1 s; inflating 3.5 GiB takes seconds more)
    assert done.max_rss < 1 << 30 and done.cpu_s < 15, (done.max_rss, done.cpu_s)
    assert not (tmp_path / "out.onnx").exists()


def test_memory_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """--max-memory lets through an array of 4 GiB (headers and zip directory agree; the data is cut short), which
    cannot be allocated under the 4 GiB cap: numpy's MemoryError was "internal error", exit 3."""
    _matmul_model(tmp_path)
    elements = ((1 << 32) - 4096) // 4
    member = npy_stream((elements,), bytes(4096))
    declared = len(member) - 4096 + 4 * elements
    (tmp_path / "x.npz").write_bytes(npz_bytes({"x.npy": member}, {"x.npy": declared}))
    done = _jailed("validate", "m.onnx", "m.onnx", "--inputs", "x.npz", "--max-memory", "100GB", cwd=tmp_path)
    assert done.returncode == 2 and _one_line(done.stderr).startswith("error: out of memory"), done.stderr


# --- time_limited_runs: only the sessions the calling thread creates (issue 32, item 5) ---------------------------
def _session(model: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])


def test_time_limited_runs_leaves_another_threads_sessions_alone(tmp_path: Path) -> None:
    """Before: ``InferenceSession.run`` was replaced on the class for the block, so a session the application
    created in another thread meanwhile ran through gsrewrite's wrapper too."""
    import onnxruntime as ort

    from gsrewrite.validation.run_limits import time_limited_runs

    model = _matmul_model(tmp_path)
    original = ort.InferenceSession.run
    feed = {"x": np.ones((1, 4), np.float32)}
    expected = feed["x"] @ (np.arange(16, dtype=np.float32).reshape(4, 4) / 16)
    inside, finished = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def library() -> None:
        with time_limited_runs("the library's model"):
            seen["library"] = session = _session(model)
            seen["library run"] = session.run(None, feed)[0]
            inside.set()
            finished.wait(60)  # a hang guard: the other thread sets it within a second

    def application() -> None:
        inside.wait(60)
        seen["class run while open"] = ort.InferenceSession.run
        seen["application"] = session = _session(model)
        seen["application run"] = session.run(None, feed)[0]
        finished.set()

    threads = [threading.Thread(target=library), threading.Thread(target=application)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert finished.is_set() and not any(thread.is_alive() for thread in threads)
    app, own = seen["application"], seen["library"]
    assert seen["class run while open"] is original and ort.InferenceSession.run is original
    assert type(app).run is ort.InferenceSession.run and "run" not in vars(app)  # onnxruntime's own method
    assert "run" in vars(own)  # the library's session: its own run, with the limit
    np.testing.assert_allclose(seen["application run"], expected)
    np.testing.assert_allclose(seen["library run"], expected)


def test_time_limited_runs_stops_a_long_run_of_a_library_session(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A session made inside the block (as onnxruntime's calibrator makes one) runs under the time limit; one made
    after the block does not; the wrapper holds its session weakly (no cycle keeping a session's memory)."""
    import weakref

    from gsrewrite.validation.run_limits import RunTimeLimitError, time_limited_runs

    model = _loop_model(tmp_path)
    monkeypatch.setenv("GSREWRITE_RUN_TIMEOUT", "0.5")
    with time_limited_runs("the library's model"):
        session = _session(model)
    with pytest.raises(RunTimeLimitError, match=r"^the library's model ran longer than 0\.5 s") as caught:
        session.run(None, {"x": np.ones((), np.float32)})
    held = weakref.ref(session)
    del session, caught  # the traceback's frames hold the session too
    assert held() is None  # freed by reference counting, no garbage collection needed
    assert "run" not in vars(_session(_matmul_model(tmp_path)))


def test_time_limited_runs_keeps_a_running_profiler(tmp_path: Path) -> None:
    """A profile function already set (a profiler) is not replaced: the block's sessions then go without the
    limit."""
    import sys

    from gsrewrite.validation.run_limits import time_limited_runs

    def profiler(frame: object, event: str, arg: object) -> None:
        pass

    sys.setprofile(profiler)
    try:
        with time_limited_runs():
            assert sys.getprofile() is profiler
            session = _session(_matmul_model(tmp_path))
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    assert "run" not in vars(session)
