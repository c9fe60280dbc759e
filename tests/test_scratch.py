"""Payloads a request makes wait in a scratch file (model_io/scratch.py): read back equal, validated by onnxruntime
from a map of that file, put back into the result before the request ends, and the file removed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.model_io import save_model
from gsrewrite.model_io.scratch import SPILL_BYTES, is_scratch, spill
from gsrewrite.model_io.weights import inlined, tensor_values, weights_from
from gsrewrite.pipelines import optimize
from gsrewrite.pipelines.options import Source


def test_a_spilled_array_reads_back_equal_and_is_put_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    values = np.random.default_rng(0).standard_normal((600, 500)).astype(np.float32)  # 1.2 MB
    assert values.nbytes >= SPILL_BYTES
    assert spill("w", values) is None  # no request bound: exported as it is
    with weights_from(tmp_path):
        small = spill("s", values[:2])
        tensor = spill("w", values)
        again = spill("v", values * 2)
        assert small is None and tensor is not None and again is not None
        assert is_scratch(tensor) and tensor.data_location == TensorProto.EXTERNAL
        path = next(e.value for e in tensor.external_data if e.key == "location")
        assert not (tmp_path / path).exists()  # never in the user's folder
        with weights_from(tmp_path):  # an inner request shares the file
            np.testing.assert_array_equal(tensor_values(again), values * 2)
        np.testing.assert_array_equal(tensor_values(tensor), values)
        model = helper.make_model(helper.make_graph([], "g", [], [], [tensor]))
        inlined(model)
        kept = model.graph.initializer[0]
        assert not is_scratch(kept) and kept.data_location == TensorProto.DEFAULT
        np.testing.assert_array_equal(numpy_helper.to_array(kept), values)
        scratch = _scratch_path(again)
        unlinked = scratch.startswith("/proc/self/fd/")  # Linux: read through its descriptor, no name in the folder
        assert (os.listdir(temp) == []) == unlinked
    assert os.listdir(temp) == []  # removed when the request ends
    assert not is_scratch(tensor)  # no scratch file bound any more


def _scratch_path(tensor: TensorProto) -> str:
    from gsrewrite.model_io.scratch import resolve

    found = resolve(next(e.value for e in tensor.external_data if e.key == "location"))
    assert found is not None
    return found


def _transposed_linear(path: Path) -> np.ndarray:
    """Reshape -> Gemm(transB = 1) -> Reshape: linear-3d-transposed computes W^T, a 2 MB tensor the request makes."""
    rng = np.random.default_rng(1)
    weight = (rng.standard_normal((1024, 512)) / 20).astype(np.float32)  # [N, K]
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.zeros(1024, np.float32), "c"),
             numpy_helper.from_array(np.array([-1, 512], np.int64), "s1"),
             numpy_helper.from_array(np.array([2, 4, 1024], np.int64), "s2")]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["x2"]),
             helper.make_node("Gemm", ["x2", "w", "c"], ["y2"], transB=1),
             helper.make_node("Reshape", ["y2", "s2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 1024])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return weight


def test_a_fused_weight_is_validated_from_the_scratch_file_and_handed_back_inline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gsrewrite.validation import in_memory

    weight = _transposed_linear(tmp_path / "m.onnx")
    seen: list[str] = []
    original = in_memory.in_memory_model

    def spy(model: onnx.ModelProto, data: bytes | None = None) -> object:
        seen.extend(t.name for t in model.graph.initializer if is_scratch(t))
        return original(model, data)

    monkeypatch.setattr(in_memory, "in_memory_model", spy)
    monkeypatch.setattr("gsrewrite.validation.runner.in_memory_model", spy)
    result = optimize(Source.mapped(tmp_path / "m.onnx"), patterns=["linear-3d"])
    assert result.counts.get("linear-3d-transposed") == 1 and result.validation is not None and result.validation.ok
    assert seen  # the candidate reached onnxruntime with the made weight in the scratch file
    made = [t for t in result.model.graph.initializer if t.name not in ("w", "c", "s1", "s2")
            and list(t.dims) == [512, 1024]]
    assert len(made) == 1 and not is_scratch(made[0]) and made[0].data_location == TensorProto.DEFAULT
    np.testing.assert_array_equal(numpy_helper.to_array(made[0]), weight.T)
    save_model(result.model, tmp_path / "out.onnx", weights_dir=result.weights_dir)
    import onnxruntime as ort

    x = np.random.default_rng(2).standard_normal((2, 4, 512)).astype(np.float32)
    (y,) = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ weight.T, rtol=1e-4, atol=1e-4)
    assert not [f for f in os.listdir(tmp_path) if "scratch" in f]


def _slow_transposed_linear(path: Path) -> None:
    """:func:`_transposed_linear` plus a Loop of 2**40 trips whose body computes its condition (so it is run, not
    refused from the graph): the request's scratch file exists while the reference run goes on."""
    _transposed_linear(path)
    model = onnx.load(path)
    # the body's names differ from the outer graph's ('w' is the weight): onnxruntime refuses a name assigned
    # twice, and the reference run then failed at once, racing the rewrite that makes the scratch file
    steps = [helper.make_node("Less", ["i", "n"], ["c2"]), helper.make_node("Add", ["v", "one"], ["v_next"])]
    body = helper.make_graph(steps, "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                      helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                      helper.make_tensor_value_info("v", TensorProto.FLOAT, [])],
                             [helper.make_tensor_value_info("c2", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_next", TensorProto.FLOAT, [])])
    model.graph.initializer.extend([numpy_helper.from_array(np.array(2**40, np.int64), "n"),
                                    numpy_helper.from_array(np.array(True), "t"),
                                    numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                                    numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    model.graph.node.append(helper.make_node("Loop", ["n", "t", "zero"], ["count"], body=body))
    model.graph.output.append(helper.make_tensor_value_info("count", TensorProto.FLOAT, []))
    onnx.save(model, path)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the scratch file through /proc")
def test_a_killed_run_leaves_no_scratch_file(tmp_path: Path) -> None:
    """SIGKILL while the scratch file holds a made weight: nothing of the run stays in the temp folder (the file was
    unlinked when created), and the next run leaves the folders as they were (its own temp files swept)."""
    import signal
    import subprocess
    import sys
    import time

    gsrewrite = Path(sys.executable).parent / "gsrewrite"
    temp = tmp_path / "tmp"
    temp.mkdir()
    _slow_transposed_linear(tmp_path / "m.onnx")
    env = {**os.environ, "TMPDIR": str(temp)}
    process = subprocess.Popen([str(gsrewrite), "optimize", "m.onnx", "out.onnx"], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
        while not _holds_scratch(process.pid, temp):
            assert process.poll() is None and time.monotonic() < deadline, "no scratch file was made"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert os.listdir(temp) == []
    again = subprocess.run([str(gsrewrite), "optimize", "m.onnx", "out.onnx", "--no-validate"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert os.listdir(temp) == [] and sorted(os.listdir(tmp_path)) == ["m.onnx", "out.onnx", "tmp"]


def _holds_scratch(pid: int, temp: Path) -> bool:
    """Whether process ``pid`` has a scratch file of the folder ``temp`` open (named, or unlinked)."""
    found = False
    for fd in os.listdir(f"/proc/{pid}/fd") if os.path.isdir(f"/proc/{pid}/fd") else ():
        try:
            found |= os.readlink(f"/proc/{pid}/fd/{fd}").startswith(f"{temp}/gsrewrite-scratch-")
        except OSError:  # closed meanwhile
            continue
    return found


def test_without_proc_the_scratch_file_is_named_by_its_pid_and_stale_ones_are_swept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gsrewrite.model_io import spill as spill_files  # the scratch file is a spill file read by path

    monkeypatch.setattr(spill_files, "_OWN_FDS", str(tmp_path / "no-proc"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / "gsrewrite-scratch-999999999-x.bin"  # no such process
    dead.write_bytes(b"left by a killed run")
    live = tmp_path / f"gsrewrite-scratch-{os.getppid()}-y.bin"  # a process that is running
    live.write_bytes(b"in use")
    with weights_from(tmp_path):
        tensor = spill("w", np.ones(1 << 19, np.float32))
        assert tensor is not None
        assert os.path.basename(_scratch_path(tensor)).startswith(f"gsrewrite-scratch-{os.getpid()}-")
        assert not dead.exists() and live.exists()
    assert sorted(os.listdir(tmp_path)) == [live.name]
