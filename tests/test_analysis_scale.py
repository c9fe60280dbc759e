"""``info``, ``profile``, ``shapes`` and ``memory`` take time linear in the model's size (issue 24, item 5).

Each check runs the installed console script on three sizes of one model family: one node (the start-up), a
small model and one ten times larger, and measures the CPU time of each run (its own rusage: not the wall
clock of a shared machine). The larger model's work (its time less the start-up's) may be at most ten times the
smaller one's, times :data:`SLACK`, plus :data:`FLOOR_S`: a bound derived on the machine itself, which a
quadratic step (a hundred times the work for ten times the nodes) exceeds by far.

* default tier: old-IR models listing every weight as a graph input, each weight read by its own Add, all the
  sums concatenated (so every sum lives until the end). Before the fix the shape walk filtered the inputs
  against a set of the initializers rebuilt per input, the memory planner rebuilt a set of inputs and
  constants per tensor and compared every pair of tensors live at once: at 10,000 weights ``info`` and
  ``profile`` took 17 s of CPU, ``shapes`` 27 s and ``memory`` over 120 s, against 0.2-2 s at 1,000.
* slow tier, collected only with ``-m slow`` or ``GSREWRITE_SCALE_FULL=1`` (an ``opt_in`` tier,
  tests/conftest.py): Relu chains of 20,000 and 200,000 nodes, the same time
  bound, and a peak RSS of at most :data:`RSS_PER_NODE` bytes per node (a 1,000,000-node chain took 60-75 s of
  CPU and 2.66 GB in ``info`` and ``profile`` before, 26 s and 0.83 GB after).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from hostile.runner import GSREWRITE
from onnx import TensorProto, helper, numpy_helper

COMMANDS = ("info", "profile", "shapes", "memory")
#: how much more than the model a linear command's work may grow (noise, caches, the allocator)
SLACK = 3
#: and in seconds of CPU, however small the smaller model's work
FLOOR_S = 1.0
#: the smallest work taken as the smaller model's (below it the measurement is noise)
MIN_WORK_S = 0.05
#: peak memory a node may add: the issue's bound, under 2 GB for a million nodes (2.66 GB before the fix)
RSS_PER_NODE = 2000


@dataclass(frozen=True)
class Run:
    cpu_s: float
    max_rss_bytes: int
    returncode: int
    stderr: str
    killed: bool


#: runs the command given as arguments and prints its CPU time and peak RSS: a child of a fresh, small process
#: (a process's peak RSS counts its parent's at the fork, which would hide a command's own under the test's)
#: the command is stopped by the kernel after ``sys.argv[1]`` seconds of CPU (``RLIMIT_CPU``: SIGXCPU, then SIGKILL)
_MEASURE = """
import json, resource, subprocess, sys
limit = int(sys.argv[1])
def cap():
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))
with open("stdout", "wb") as out, open("stderr", "wb") as err:
    code = subprocess.run(sys.argv[2:], stdout=out, stderr=err, preexec_fn=cap).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps([code, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024]))
"""
#: the wall-time hang guard, a multiple of the CPU limit: a run that gets its CPU limit's worth of the machine
#: even at a tenth of a core is not stopped by it
HANG_GUARD_FACTOR = 10


def _run(command: str, model: Path, out: Path, cpu_limit: float) -> Run:
    """The installed script on ``model``, with its CPU time and peak RSS; stopped after ``cpu_limit`` seconds of
    CPU (killed: True). A bound on CPU, not on wall time, holds on a loaded machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GSREWRITE_")}
    limit = math.ceil(cpu_limit)
    process = subprocess.Popen([sys.executable, "-c", _MEASURE, str(limit), str(GSREWRITE), command, str(model)],
                               cwd=out, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        report, _ = process.communicate(timeout=HANG_GUARD_FACTOR * limit + 60)
    except subprocess.TimeoutExpired:  # a hang (sleeping, not computing): the CPU limit never comes
        os.killpg(process.pid, signal.SIGKILL)  # the command too
        process.communicate()
        return Run(cpu_limit, 0, -signal.SIGKILL, "hung", True)
    code, cpu_s, rss = json.loads(report)
    killed = code in (-signal.SIGXCPU, -signal.SIGKILL)
    return Run(cpu_s, rss, code, (out / "stderr").read_text(errors="replace"), killed)


def _fan_out(n: int) -> onnx.ModelProto:
    """x + w_i for n weights listed as graph inputs (IR 3 style), all n sums concatenated."""
    weights = [numpy_helper.from_array(np.full((1, 8), i, np.float32), f"w{i}") for i in range(n)]
    nodes = [helper.make_node("Add", ["x", f"w{i}"], [f"t{i}"]) for i in range(n)]
    nodes.append(helper.make_node("Concat", [f"t{i}" for i in range(n)], ["y"], axis=0))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])]
    inputs += [helper.make_tensor_value_info(f"w{i}", TensorProto.FLOAT, [1, 8]) for i in range(n)]
    graph = helper.make_graph(nodes, "fan_out", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    return model


def _chain(n: int) -> onnx.ModelProto:
    """x -> Relu -> ... -> Relu -> y, n nodes."""
    names = ["x", *(f"t{i}" for i in range(1, n)), "y"]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"n{i}") for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


ModelFile = Callable[[Callable[[int], onnx.ModelProto], int], Path]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> ModelFile:
    """``model_file(build, n)``: the path of ``build(n)`` saved, built once for all the commands of the module."""
    saved: dict[tuple[str, int], Path] = {}

    def get(build: Callable[[int], onnx.ModelProto], n: int) -> Path:
        key = (build.__name__, n)
        if key not in saved:
            saved[key] = tmp_path_factory.mktemp(f"{build.__name__}-{n}") / "m.onnx"
            onnx.save(build(n), saved[key])
        return saved[key]

    return get


def _measure(command: str, model: Path, folder: Path, cpu_limit: float) -> Run:
    folder.mkdir()
    run = _run(command, model, folder, cpu_limit)
    assert not run.killed, f"{command} on the {folder.name} model: stopped at {cpu_limit:.0f} s of CPU ({run.stderr})"
    assert run.returncode == 0 and "Traceback" not in run.stderr, (command, folder.name, run)
    return run


def _check_linear(command: str, build: Callable[[int], onnx.ModelProto], small: int, model_file: ModelFile,
                  tmp_path: Path) -> tuple[Run, Run, Run]:
    """Runs at 1, ``small`` and ten times ``small`` nodes; the third's work within the bound (module docstring)."""
    # 120 s of CPU: a guard, far above the 0.2-2 s these take
    base = _measure(command, model_file(build, 1), tmp_path / "one", cpu_limit=120)
    first = _measure(command, model_file(build, small), tmp_path / "small", cpu_limit=120)
    bound = 10 * SLACK * max(first.cpu_s - base.cpu_s, MIN_WORK_S) + FLOOR_S
    # past the bound there is no need to wait for the end (a quadratic step took minutes of CPU)
    large = _measure(command, model_file(build, 10 * small), tmp_path / "large",
                     cpu_limit=base.cpu_s + 2 * bound + 30)
    assert large.cpu_s - base.cpu_s <= bound, (
        f"{command}: {10 * small} nodes took {large.cpu_s - base.cpu_s:.2f} s of CPU beyond start-up, "
        f"{small} nodes {first.cpu_s - base.cpu_s:.2f} s: more than {bound:.2f} s, the linear bound")
    return base, first, large


@pytest.mark.parametrize("command", COMMANDS)
def test_weights_listed_as_inputs_and_long_lived_tensors_scale_linearly(command: str, model_file: ModelFile,
                                                                         tmp_path: Path) -> None:
    _check_linear(command, _fan_out, 1000, model_file, tmp_path)


@pytest.mark.slow
@pytest.mark.opt_in("GSREWRITE_SCALE_FULL")  # collected only with -m slow or GSREWRITE_SCALE_FULL=1 (conftest)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_long_chain_scales_linearly_in_time_and_memory(command: str, model_file: ModelFile, tmp_path: Path) -> None:
    base, _, large = _check_linear(command, _chain, 20_000, model_file, tmp_path)
    grown = large.max_rss_bytes - base.max_rss_bytes
    assert grown <= 200_000 * RSS_PER_NODE, f"{command}: peak RSS grew {grown >> 20} MiB for 200,000 nodes"
