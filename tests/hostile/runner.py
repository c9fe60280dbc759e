"""Run the installed ``gsrewrite`` console script on one model, in a jail: 4 GiB of address space, a timeout,
a fresh working folder, a fresh TMPDIR and a fresh output folder, and report what it left behind."""

from __future__ import annotations

import hashlib
import os
import resource
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._base import CALIBRATION_DIR, INPUTS_FILE

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
ADDRESS_SPACE = 4 << 30
#: a hang guard, not a bound on speed: a hostile case takes 1-7 s of wall time (start-up; a Loop model's runs are
#: stopped by GSREWRITE_RUN_TIMEOUT=5), so 120 s only ever ends a command that hangs, even on a loaded machine
TIMEOUT_S = 120.0
#: the hang guard of :func:`measured_run`: the commands measured with it take 1-3 s; only a hang gets near this
HANG_GUARD_S = 300.0
OUTPUT_FILE = "out.onnx"

#: command -> (argument list for a model and an output path, whether the command writes the output); the commands
#: of DATA_COMMANDS read the case's INPUTS_FILE / CALIBRATION_DIR when it has them
COMMANDS: dict[str, tuple[Callable[[str, str], list[str]], bool]] = {
    "info": (lambda model, out: ["info", model], False),
    "validate": (lambda model, out: ["validate", model, model, *_data(model, "--inputs")], False),
    "simplify": (lambda model, out: ["simplify", model, "-o", out], True),
    "optimize": (lambda model, out: ["optimize", model, "-o", out], True),
    "apply": (lambda model, out: ["apply", "--pattern", "all", model, "-o", out], True),
    "explain": (lambda model, out: ["explain", "--pattern", "all", model], False),
    "extract": (lambda model, out: ["extract", model, *_io_names(model), *_data(model, "--input-data"), "-o", out],
                True),
    "shapes": (lambda model, out: ["shapes", model, "-o", out], True),
    "compress": (lambda model, out: ["compress", model, "-o", out, *_strategy(model), *_data(model, "--inputs"),
                                     "--bench-runs", "0"], True),
    "profile": (lambda model, out: ["profile", model], False),
    "bench": (lambda model, out: ["bench", model, "--runs", "1", "--warmup", "0", *_data(model, "--inputs")], False),
    "memory": (lambda model, out: ["memory", model], False),
    "compute-graph": (lambda model, out: ["compute-graph", model, "-o", out, "--shape-engine",
                                          out + ".json"], True),
}
def _data(model: str, option: str) -> list[str]:
    """``option INPUTS_FILE`` when the case has one beside the model (a FIFO or a dangling link counts)."""
    path = os.path.join(os.path.dirname(model), INPUTS_FILE)
    return [option, path] if os.path.lexists(path) else []


def _strategy(model: str) -> list[str]:
    """static-int8 calibrated on the case's CALIBRATION_DIR when it has one, else weight-only int8."""
    folder = os.path.join(os.path.dirname(model), CALIBRATION_DIR)
    if os.path.isdir(folder):
        return ["--strategy", "static-int8", "--calibration", folder]
    return ["--strategy", "int8"]


def _io_names(model: str) -> list[str]:
    """``--inputs`` (every graph input) and ``--outputs`` (the first output) of the model when it parses, else
    names it does not have (the command must then fail cleanly)."""
    import stat

    import onnx

    try:
        info = os.stat(model)  # a FIFO or a device would block or never end: only small regular files are read
        if not stat.S_ISREG(info.st_mode) or info.st_size > 1 << 26:
            raise ValueError(model)
        graph = onnx.load(model, load_external_data=False).graph
        inputs = ",".join(i.name for i in graph.input) or "_no_input_"
        outputs = graph.output[0].name if graph.output else "_no_output_"
    except Exception:  # hostile: whatever the CLI makes of it is what is tested
        inputs, outputs = "_no_input_", "_no_output_"
    return ["--inputs", inputs, "--outputs", outputs]


#: files a writing command leaves beside OUTPUT_FILE on success (compute-graph's shape engine)
EXTRA_OUTPUTS: dict[str, tuple[str, ...]] = {"compute-graph": ("out.onnx.json",)}


#: commands `gsrewrite --help` lists that take no model (checked by the test to keep COMMANDS complete)
MODEL_FREE_COMMANDS = frozenset({"passes", "patterns", "plugins"})


@dataclass(frozen=True)
class Run:
    """What one jailed CLI run did."""

    exit_code: int | None  # None: killed by the timeout
    stdout: str
    stderr: str
    left_in_output: list[str]
    left_in_tmp: list[str]
    left_in_cwd: list[str]


def limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_jailed(command: str, model: Path, scratch: Path, timeout: float = TIMEOUT_S) -> Run:
    """Run ``gsrewrite COMMAND`` on ``model`` with its output, TMPDIR and working folder under ``scratch``."""
    out_dir, tmp_dir, cwd = (scratch / "out", scratch / "tmp", scratch / "cwd")
    for folder in (out_dir, tmp_dir, cwd):
        folder.mkdir()
    argv, _ = COMMANDS[command]
    env = {**os.environ, "TMPDIR": str(tmp_dir), "TEMP": str(tmp_dir), "TMP": str(tmp_dir),
           "GSREWRITE_RUN_TIMEOUT": "5"}  # a Loop of 2**62 trips: validation gives up within the test's timeout
    try:
        done = subprocess.run([str(GSREWRITE), *argv(str(model), str(out_dir / OUTPUT_FILE))], cwd=cwd, env=env,
                              capture_output=True, text=True, errors="replace", timeout=timeout,
                              preexec_fn=limit_address_space, stdin=subprocess.DEVNULL)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = None, _text(exc.stdout), _text(exc.stderr)
    return Run(code, stdout, stderr, _listing(out_dir), _listing(tmp_dir), _listing(cwd))


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` -> its kind and content hash, never following symlinks or opening FIFOs and
    devices (the corpus holds a FIFO and links to /dev/zero)."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            entries[os.path.relpath(path, root)] = _fingerprint(path)
    return entries


def _fingerprint(path: str) -> str:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"link:{os.readlink(path)}"
    if stat.S_ISREG(info.st_mode):
        with open(path, "rb") as f:
            return f"file:{hashlib.sha256(f.read()).hexdigest()}:{stat.S_IMODE(info.st_mode):o}"
    return f"{stat.filemode(info.st_mode)[0]}:{stat.S_IMODE(info.st_mode):o}"


@dataclass(frozen=True)
class Measured:
    """A finished child process: its exit code, output and its own resource use (``os.wait4``'s rusage)."""

    returncode: int
    stdout: str
    stderr: str
    #: user + system CPU seconds of the child (all its threads): a bound on work that holds on a loaded machine,
    #: where its wall time does not
    cpu_s: float
    #: the command's own peak resident bytes
    max_rss: int
    #: killed by the hang guard
    hung: bool


#: runs the command given after the report path and writes [exit code, CPU seconds, peak RSS bytes] of it there:
#: measured from this small launcher, not from the test process, because a child's ``ru_maxrss`` keeps the
#: high-water mark of the process it was forked from (a pytest worker of 1.3 GB made a 60 MB command read 1.3 GB)
_LAUNCH = """
import json, resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as report:
    json.dump([code, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024], report)
"""


def measured_run(argv: Sequence[str | Path], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
                 preexec_fn: Callable[[], None] | None = None, hang_guard: float = HANG_GUARD_S) -> Measured:
    """Run ``argv`` to its end and measure its CPU time and peak RSS (its own: started from a small launcher,
    :data:`_LAUNCH`, which ``preexec_fn``'s limits are set on and the command inherits). ``hang_guard`` seconds of
    wall time kill both: a guard against a hang, far above any expected time, never the assertion of a test."""
    import json
    import signal

    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryFile("w+", errors="replace") as out, \
            tempfile.TemporaryFile("w+", errors="replace") as err:
        report = Path(folder) / "report.json"
        process = subprocess.Popen([sys.executable, "-c", _LAUNCH, str(report), *[str(a) for a in argv]], cwd=cwd,
                                   env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, text=True,
                                   preexec_fn=preexec_fn, start_new_session=True)
        hung = threading.Event()

        def kill() -> None:
            hung.set()
            os.killpg(process.pid, signal.SIGKILL)  # the launcher and the command

        timer = threading.Timer(hang_guard, kill)
        timer.start()
        try:
            process.wait()
        finally:
            timer.cancel()
        out.seek(0)
        err.seek(0)
        if not report.exists():  # the launcher itself was killed
            return Measured(process.returncode, out.read(), err.read(), 0.0, 0, hung.is_set())
        code, cpu_s, peak = json.loads(report.read_text())
        return Measured(int(code), out.read(), err.read(), float(cpu_s), int(peak), hung.is_set())
