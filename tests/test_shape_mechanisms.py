"""Symbolic shapes through the mechanisms real exports compute shapes with (issue 28, item 2;
tests/fixtures/shape_mechanisms.py builds one model per mechanism): every tensor agrees with onnxruntime at three
sizes, with symbols the closed forms are simplified, with every input sized every tensor is a number, and no
model leaves more tensors unknown than onnxruntime's own ``symbolic_shape_infer`` (the cross-check, not the
engine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hostile.runner import GSREWRITE
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.pipelines.shape_check import check_shapes
from gsrewrite.shapes.walk import infer_symbolic, parse_input_shapes, shape_text

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))

import real_world
import shape_mechanisms
from shape_mechanisms import ort_unknown

MODELS = shape_mechanisms.build_all()


def _node_outputs(model: onnx.ModelProto) -> list[str]:
    return [o for node in model.graph.node for o in node.output if o]


def _given(sizes: dict[str, list[int]]) -> list[str]:
    return [f"{name}:{','.join(map(str, dims))}" for name, dims in sizes.items()]


def _not_numeric(model: onnx.ModelProto, sizes: dict[str, list[int]]) -> list[str]:
    shapes = infer_symbolic(model, parse_input_shapes(_given(sizes)))
    return [name for name in _node_outputs(model) if shapes.shape(name) is None
            or not all(isinstance(d, int) for d in shapes.shape(name) or ())]


@pytest.mark.parametrize("name", shape_mechanisms.runnable())
def test_every_tensor_agrees_with_onnxruntime_at_three_sizes(name: str) -> None:
    model, _ = MODELS[name]
    shapes = infer_symbolic(model)
    verdict = check_shapes(model, shapes)
    assert verdict.ok and len(verdict.sizes) == 3, verdict.to_dict()
    unknown = {n for n in shapes.unknown if n in _node_outputs(model)}
    # what is not checkable is only what no closed form holds (an If whose branches disagree)
    assert all(size.unchecked == len(unknown) for size in verdict.sizes), (unknown, verdict.to_dict())


@pytest.mark.parametrize("name", shape_mechanisms.runnable())
def test_no_more_unknown_tensors_than_onnxruntimes_symbolic_inference(name: str) -> None:
    pytest.importorskip("sympy")  # onnxruntime's symbolic_shape_infer needs it (the dev extra installs it)
    model, sizes = MODELS[name]
    ours = [n for n in infer_symbolic(model).unknown if n in _node_outputs(model)]
    assert len(ours) <= len(ort_unknown(model)), ours
    assert _not_numeric(model, sizes) == []  # sized: every tensor a number (onnxruntime's tool: not always)


def test_the_closed_forms_are_simplified() -> None:
    def outputs(name: str) -> dict[str, list[str | int] | None]:
        model, _ = MODELS[name]
        shapes = infer_symbolic(model)
        return {o.name: shape_text(shapes.shape(o.name)) for o in model.graph.output}

    # "same" padding twice, through float Ceil/Max/Floor and the legacy pads reordering: ceil(h/4)
    assert list(outputs("same_pad").values()) == [["batch", 8, "(height + 3)//4", "(width + 3)//4"]]
    assert list(outputs("resize_from_shape").values()) == [["batch", 4, "2*height", "2*width"]]
    assert list(outputs("anchors").values()) == [["batch", "height*width", 2]]
    assert list(outputs("recurrent").values()) == [["batch", "seq_len", 3]]
    ifs = outputs("if_shape")
    assert ifs["eight"] == ["batch", 8]  # crop or pad: both branches give 8 columns
    loop = outputs("loop_over_shape")
    assert loop["peaks"] == ["rows"] and loop["grown"] == ["rows + 1", "cols"]
    # onnxruntime's sympy dim on the custom op's output is the Conv's (height - 1)//2 + 1: one dim, not max(...)
    assert list(outputs("bound_floor").values()) == [["batch", 4, "(height - 1)//2 + 1", "(width - 1)//2 + 1"]]


def test_sized_inputs_bind_every_dim_the_model_declares() -> None:
    """The custom op's output dims come only from the exporter's value_info (``floor(height/2 - 1/2) + 1``):
    with x's shape given, they are numbers too."""
    model, sizes = MODELS["bound_floor"]
    shapes = infer_symbolic(model, parse_input_shapes(_given(sizes)))
    assert shapes.shape("halved") == [1, 4, 32, 24] and shapes.bindings == {"batch": 1, "height": 64, "width": 47}
    assert _not_numeric(model, sizes) == []


def test_a_symbol_given_two_sizes_is_an_error() -> None:
    from gsrewrite.errors import UsageError

    model, _ = MODELS["bound_floor"]
    with pytest.raises(UsageError, match="'height' two sizes: height=32 and x\\[2\\] = 64"):
        infer_symbolic(model, parse_input_shapes(["height=32", "x:1,3,64,47"]))


@pytest.mark.parametrize("name", sorted(real_world.build_all()))
def test_real_world_fixtures_resolve_when_sized(name: str) -> None:
    pytest.importorskip("sympy")
    model, feeds = real_world.build_all()[name]
    sizes = {k: list(v.shape) for k, v in feeds.items() if v.ndim}
    assert _not_numeric(model, sizes) == []
    assert len([n for n in infer_symbolic(model).unknown if n in _node_outputs(model)]) <= len(ort_unknown(model))


def test_batch_first_recurrent_layouts() -> None:
    """layout = 1 (onnxruntime's CPU kernels refuse it): against ONNX's own inference at static sizes."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("LSTM", ["x", "w", "r"], ["y", "yh", "yc"], hidden_size=5, layout=1,
                              direction="bidirectional"),
             helper.make_node("GRU", ["x", "wg", "rg"], ["g", "gh"], hidden_size=5, layout=1)]
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n) for n, s in
             (("w", (2, 20, 3)), ("r", (2, 20, 5)), ("wg", (1, 15, 3)), ("rg", (1, 15, 5)))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 7, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in ("y", "yh", "yc", "g", "gh")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx_types = onnx.shape_inference.infer_shapes(model).graph.output
    ours = infer_symbolic(model)
    assert ours.fallback_ops == {}
    for output in onnx_types:
        assert ours.shape(output.name) == [d.dim_value for d in output.type.tensor_type.shape.dim], output.name


def test_shapes_cli_gives_numbers_when_the_input_is_sized(tmp_path: Path) -> None:
    model, sizes = MODELS["same_pad"]
    path = tmp_path / "same_pad.onnx"
    onnx.save(model, path)
    done = subprocess.run([str(GSREWRITE), "shapes", str(path), "--all", "--json", "--input-shape", _given(sizes)[0]],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["unknown"] == [] and data["outputs"] == {"relu_165": [1, 8, 10, 12]}
    assert all(all(isinstance(d, int) for d in t["shape"]) for t in data["tensors"].values())


def test_check_and_compute_graph_run_on_a_detector_that_wants_multiples_of_its_stride(tmp_path: Path) -> None:
    """Validation's sample (16 x 16) is rejected by onnxruntime: the check grows it as validation does (256), skips
    the sizes onnxruntime rejects, and keeps the sizes given with --input-shape."""
    model, sizes = MODELS["strided_detector"]
    path = tmp_path / "detector.onnx"
    onnx.save(model, path)

    def run(*args: str) -> dict:
        done = subprocess.run([str(GSREWRITE), *args, "--json"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    check = run("shapes", str(path), "--check")["check"]
    assert check["ok"] and len(check["sizes"]) == 3
    assert all(s["bindings"]["height"] % 32 == 0 and s["unchecked"] == 0 for s in check["sizes"])
    given = run("shapes", str(path), "--check", "--input-shape", _given(sizes)[0])["check"]
    assert given["ok"] and given["sizes"][0]["bindings"] == {"batch": 1, "height": 96, "width": 160}
    out = run("compute-graph", str(path), "-o", str(tmp_path / "c.onnx"), "--shape-engine", str(tmp_path / "e.json"),
              "--input-shape", _given(sizes)[0])
    assert out["check"]["ok"] and out["removed_nodes"] > 0


def test_question_mark_dims_are_not_one_size() -> None:
    """paddle2onnx writes ``?`` for a dim it does not know: an image [-1, 3, ?, ?] is not square, and a height
    and a width given for it are not two sizes of one symbol."""
    model, _ = real_world.build_all()["paddle_det"]
    for dim in model.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.Clear()
        dim.dim_param = "?"
    shapes = infer_symbolic(model, parse_input_shapes(["x:1,3,64,96"]))
    assert shapes.shape(model.graph.output[0].name) == [1, 1, 32, 48]
    symbolic = infer_symbolic(model).shape("x")
    assert symbolic is not None and symbolic[2] != symbolic[3]
