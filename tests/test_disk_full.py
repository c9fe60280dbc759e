"""A write that runs out of room (a full temp folder or output folder, a disk quota, the file size limit) is one
line naming the folder and what was being written, exit 2, and leaves no temp file behind: through the installed
console script under a file size limit (RLIMIT_FSIZE: writes past it fail with EFBIG, as a full disk fails with
ENOSPC; no root needed for a small file system), and ENOSPC itself in-process."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
#: the file size limit of the runs: the files below are larger
FILE_SIZE_LIMIT = 1 << 20


def _limited(*args: str, cwd: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """The installed script with TMPDIR=``tmp`` and a file size limit (SIGXFSZ as it is by default: ending the
    process, unless the CLI ignores it)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))

    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.run([str(GSREWRITE), *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env,
                          preexec_fn=limit)


def _linear(path: Path) -> None:
    """Reshape -> Gemm(transB = 1) -> Reshape with a 2 MB weight: linear-3d-transposed makes W^T (2 MB), which goes
    to the request's scratch file."""
    weight = np.random.default_rng(1).standard_normal((1024, 512)).astype(np.float32) / 20
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.zeros(1024, np.float32), "c"),
             numpy_helper.from_array(np.array([-1, 512], np.int64), "s1"),
             numpy_helper.from_array(np.array([2, 4, 1024], np.int64), "s2")]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["x2"]),
             helper.make_node("Gemm", ["x2", "w", "c"], ["y2"], transB=1),
             helper.make_node("Reshape", ["y2", "s2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 1024])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def _wide(path: Path) -> None:
    """y = Identity(Identity(x)), x [batch, sequence, 65536]: 8.4 MB of outputs at the generated sizes, which
    validation keeps in a temp file."""
    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["y"])]
    shape: list[str | int] = ["batch", "sequence", 65536]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


@pytest.mark.parametrize(("make", "args", "where", "what"), [
    (_linear, ["optimize", "m.onnx", "out.onnx"], "tmp", "scratch file"),
    (_wide, ["validate", "m.onnx", "m.onnx"], "tmp", "reference outputs"),
    (_linear, ["simplify", "m.onnx", "out.onnx", "--no-validate"], "cwd", "'out.onnx'"),
    (_linear, ["compress", "m.onnx", "out.onnx", "--strategy", "static-int8"], "tmp", "quantizer"),
])
def test_a_write_past_the_room_left_is_one_line_and_leaves_nothing(tmp_path: Path, make: object, args: list[str],
                                                                   where: str, what: str) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    make(tmp_path / "m.onnx")  # type: ignore[operator]
    before = set(os.listdir(tmp_path))
    done = _limited(*args, cwd=tmp_path, tmp=tmp)
    assert done.returncode == 2, (done.returncode, done.stderr)  # not killed by SIGXFSZ, not exit 3
    assert len(done.stderr.splitlines()) == 1 and done.stdout == "", done.stderr
    folder = tmp if where == "tmp" else tmp_path
    assert f"in '{folder}'" in done.stderr and what in done.stderr and "file size limit" in done.stderr, done.stderr
    assert os.listdir(tmp) == [] and set(os.listdir(tmp_path)) == before


def test_a_full_temp_folder_is_a_no_space_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gsrewrite.errors import NoSpaceError
    from gsrewrite.model_io import scratch, spill
    from gsrewrite.model_io.weights import weights_from

    def full(*args: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr(spill.os, "pwrite", full)  # the one writer of spill files
    with pytest.raises(NoSpaceError, match=f"scratch file.* in '{tmp_path}': no space left on the device; TMPDIR"), \
            weights_from(tmp_path):
        scratch.spill("w", np.ones(1 << 19, np.float32))
    assert os.listdir(tmp_path) == []
