"""Generated inputs start at sizes the graph's ops accept (gsrewrite/shapes/dim_minimums.py: a reflect Pad needs more
than its pads, a convolution its window), with dims tied inside If branches too (a recurrent state's batch):
validate, optimize, bench and shapes --check run a VAD-like model through the installed console script, which its
16 generated samples failed (``Pad reflect: pre-pad (64) exceeds maximum allowed (15)``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.validation.dims import input_dims

GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _init(name: str, value: object, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _plain(path: Path) -> None:
    """x [batch, samples] -> [batch, 1, samples] -> reflect Pad of 64 on both sides -> Conv 256 wide, stride 64."""
    nodes = [helper.make_node("Unsqueeze", ["x", "one"], ["x3"]),
             helper.make_node("Pad", ["x3", "pads"], ["padded"], mode="reflect"),
             helper.make_node("Conv", ["padded", "w"], ["c"], strides=[64]),
             helper.make_node("Identity", ["c"], ["y"])]  # something for optimize to remove
    inits = [_init("one", [1]), _init("pads", [0, 0, 64, 0, 0, 64]),
             _init("w", np.random.default_rng(0).standard_normal((4, 1, 256)), np.float32)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "samples"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _vad(path: Path) -> None:
    """silero-vad's shape: input [?, ?], state [1, ?, 8], sr []; ``sr == 16000`` picks an If branch that pads the
    audio by 64 (reflect), convolves it 256 wide and runs an LSTM from ``state`` (so the state's unnamed dim is the
    input's batch, a relation only the branch holds); the other branch, 128 wide."""
    rng = np.random.default_rng(0)

    def branch(name: str, width: int) -> onnx.GraphProto:
        nodes = [helper.make_node("Unsqueeze", ["input", "one"], [f"{name}_x"]),
                 helper.make_node("Pad", [f"{name}_x", "pads"], [f"{name}_p"], mode="reflect"),
                 helper.make_node("Conv", [f"{name}_p", f"w{width}"], [f"{name}_c"], strides=[width // 2]),
                 helper.make_node("Transpose", [f"{name}_c"], [f"{name}_t"], perm=[2, 0, 1]),
                 helper.make_node("LSTM", [f"{name}_t", "lw", "lr", "", "", "state"], ["", f"{name}_h"],
                                  hidden_size=8)]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_h", TensorProto.FLOAT,
                                                                                  None)])

    inits = [_init("one", [1]), _init("pads", [0, 0, 0, 0, 0, 64]), _init("rate", 16000),
             _init("w256", rng.standard_normal((8, 1, 256)) / 16, np.float32),
             _init("w128", rng.standard_normal((8, 1, 128)) / 16, np.float32),
             _init("lw", rng.standard_normal((1, 32, 8)) / 4, np.float32),
             _init("lr", rng.standard_normal((1, 32, 8)) / 4, np.float32)]
    nodes = [helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["h"], then_branch=branch("t", 256), else_branch=branch("e", 128)),
             helper.make_node("Identity", ["h"], ["stateN"])]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, None]),
              helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, None, 8]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, [])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("stateN", TensorProto.FLOAT, None)],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("make", [_plain, _vad])
@pytest.mark.parametrize("command", [["validate", "m.onnx", "m.onnx"], ["optimize", "m.onnx", "out.onnx"],
                                     ["bench", "m.onnx", "--runs", "1"], ["shapes", "--check", "m.onnx"]])
def test_a_model_that_pads_its_audio_gets_inputs_it_accepts(tmp_path: Path, make: object,
                                                             command: list[str]) -> None:
    make(tmp_path / "m.onnx")  # type: ignore[operator]
    done = subprocess.run([str(GSREWRITE), *command], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_smallest_sizes_come_from_the_graph(tmp_path: Path) -> None:
    _plain(tmp_path / "plain.onnx")
    _vad(tmp_path / "vad.onnx")
    plain = input_dims(onnx.load(tmp_path / "plain.onnx"))
    assert plain.sample_bindings() == {"batch": 2, "samples": 128}  # 128 + 2 x 64 = the Conv's 256
    vad = input_dims(onnx.load(tmp_path / "vad.onnx"))
    assert vad.sample() == {"input": (2, 192), "state": (1, 2, 8), "sr": ()}  # 192 + 64 = 256; the LSTM's batch
