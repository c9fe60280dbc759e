"""Temp files of saves: named ``.<output name>.gsrewrite-<pid>-<random>.tmp``, removed when the CLI gets SIGTERM or
SIGINT (exit 143 / 130 with one line), and swept by the next save into the folder when a killed process (SIGKILL)
left them behind — never one of a live process.

Saves are paused mid-write with the test hook ``GSREWRITE_TEST_SAVE_PAUSE=SECONDS`` (gsrewrite/model_io/saving.py)."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.errors import OutputError
from gsrewrite.model_io import save_model, saving

GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Add", ["t", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])],
        [numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def _paused_save(folder: Path, *options: str) -> subprocess.Popen[str]:
    """``gsrewrite simplify`` writing into ``folder``, paused once its first temp file exists."""
    onnx.save(_model(), folder / "m.onnx")
    env = dict(os.environ, GSREWRITE_TEST_SAVE_PAUSE="60")
    process = subprocess.Popen(
        [str(GSREWRITE), "simplify", "m.onnx", "-o", "out.onnx", *options], cwd=folder, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a background job may ignore SIGINT
    # a hang guard, not a bound on speed: the temp file appears 1-2 s after the start, even on a loaded machine
    deadline = time.monotonic() + 120
    while not _temp_files(folder):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    return process


@pytest.mark.parametrize(("signum", "options", "code", "message"), [
    (signal.SIGTERM, (), 143, "terminated"),                    # the staged write (while validation runs)
    (signal.SIGINT, (), 130, "interrupted"),
    (signal.SIGTERM, ("--external-data",), 143, "terminated"),  # the save on a worker thread
])
def test_a_signal_mid_save_removes_the_temp_files(tmp_path: Path, signum: int, options: tuple[str, ...], code: int,
                                                  message: str) -> None:
    process = _paused_save(tmp_path, *options)
    (name,) = _temp_files(tmp_path)
    assert name.startswith(".out.onnx") and f".gsrewrite-{process.pid}-" in name
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code and stderr.strip().splitlines() == [message], stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # no temp file, no output


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_the_next_save_sweeps_what_a_killed_save_left(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    process = _paused_save(tmp_path)
    process.kill()
    process.communicate(timeout=60)
    (killed,) = _temp_files(tmp_path)
    live = f".other.onnx.gsrewrite-{os.getpid()}-abcd1234.tmp"  # a save of a process that still runs
    old = f".old.onnx.gsrewrite-{os.getpid()}-efgh5678.tmp"     # ... or a pid reused since: too old to be live
    dead = f".x.onnx.data.gsrewrite-{_dead_pid()}-ijkl9012.tmp"
    foreign = ".notes.txt.tmp"  # not this tool's
    for name in (live, old, dead, foreign):
        (tmp_path / name).write_bytes(b"partial")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(tmp_path / old, (two_days_ago, two_days_ago))
    with caplog.at_level(logging.INFO, logger="gsrewrite"):
        save_model(_model(), tmp_path / "next.onnx")
    assert _temp_files(tmp_path) == sorted([foreign, live])
    swept = [r.getMessage() for r in caplog.records if "temp file of an interrupted gsrewrite save" in r.getMessage()]
    assert len(swept) == 3 and any(killed in m and f"process {process.pid} is gone" in m for m in swept)
    assert any(old in m and "hours old" in m for m in swept)


def test_a_temp_file_its_writer_holds_is_never_swept(tmp_path: Path) -> None:
    # a writer in another pid namespace looks dead by its pid; its lock says otherwise
    path = tmp_path / f".m.onnx.gsrewrite-{_dead_pid()}-abcd1234.tmp"
    path.write_bytes(b"partial")
    with open(path, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert saving.remove_stale_temp_files(tmp_path) == [] and path.exists()
    assert saving.remove_stale_temp_files(tmp_path) == [path.name] and not path.exists()


def test_a_pending_file_is_locked_and_named_for_its_process(tmp_path: Path) -> None:
    pending = saving.PendingFile(str(tmp_path / "out.onnx"))
    try:
        name = Path(pending.tmp).name
        assert name.startswith(f".out.onnx.gsrewrite-{os.getpid()}-") and name.endswith(".tmp")
        assert saving.remove_stale_temp_files(tmp_path) == [] and Path(pending.tmp).exists()
        pending.file.write(b"content")
        pending.commit()
    finally:
        pending.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]
    assert (tmp_path / "out.onnx").read_bytes() == b"content"


def test_an_interrupt_while_a_temp_file_is_created_removes_it(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(saving, "_pause_for_tests", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_model(_model(), tmp_path / "out.onnx", external_data=True)
    assert list(tmp_path.iterdir()) == []


def test_cancelled_saves_put_nothing_in_place(tmp_path: Path) -> None:
    saving.cancel_saves()
    try:
        for options in ({}, {"external_data": True}):
            with pytest.raises(OutputError, match="interrupted"):
                save_model(_model(), tmp_path / "out.onnx", **options)
            assert list(tmp_path.iterdir()) == []
    finally:
        saving.allow_saves()
    save_model(_model(), tmp_path / "out.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]
