"""The fast importer builds the graph onnx-graphsurgeon's importer builds, and falls back to it otherwise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper
from onnx_graphsurgeon.ir.tensor import LazyValues

from gsrewrite.engine import fast_import
from gsrewrite.engine.graph import infer_shapes
from gsrewrite.testing import model_from_text

ROOT = Path(__file__).resolve().parent.parent
MODELS = sorted((ROOT / "tests" / "fixtures" / "models").glob("*.onnx")) + sorted((ROOT / "examples").glob("*.onnx"))


def _tensor_state(tensor: gs.Tensor) -> tuple:
    if isinstance(tensor, gs.Constant):
        lazy = tensor._values  # before .values: reading them replaces the lazy object with the array
        declared = (repr(lazy.dtype), list(lazy.shape), lazy.nbytes) if isinstance(lazy, LazyValues) else None
        state = ("C", tensor.name, declared, repr(tensor.dtype), list(tensor.shape), tensor.data_location,
                 tensor._export_dtype)
        values = tensor.values
        return (*state, str(values.dtype), values.shape, values.tobytes())
    shape = list(tensor.shape) if tensor.shape is not None else None
    return ("V", tensor.name, repr(tensor.dtype), shape, tensor.type)


def _attr_state(value: object) -> object:
    return _tensor_state(value) if isinstance(value, gs.Tensor) else value


def _graph_state(graph: gs.Graph) -> tuple:
    tensors = graph.tensors()
    nodes = [(n.op, n.name, n.domain, [(k, _attr_state(v)) for k, v in n.attrs.items()],
              [t.name for t in n.inputs], [t.name for t in n.outputs],
              [_tensor_state(t) for t in n.inputs if not t.name]) for n in graph.nodes]
    links = sorted((name, [n.name for n in t.inputs], [n.name for n in t.outputs]) for name, t in tensors.items())
    return (graph.name, graph.doc_string, graph.opset, list(graph.import_domains), graph.producer_name,
            graph.producer_version, graph.ir_version, [t.name for t in graph.inputs],
            [t.name for t in graph.outputs], sorted(_tensor_state(t) for t in tensors.values()), nodes, links)


def _same_import(model: onnx.ModelProto) -> gs.Graph:
    fast, reference = fast_import.import_onnx(model), gs.import_onnx(model)
    assert _graph_state(fast) == _graph_state(reference)
    assert gs.export_onnx(fast, do_type_check=False) == gs.export_onnx(reference, do_type_check=False)
    return fast


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_fixture_exports_import_alike(path: Path) -> None:
    model = onnx.load(path)
    _same_import(model)
    _same_import(infer_shapes(model))  # with every intermediate typed, as the passes see it


def test_quirks_and_untyped_tensors_import_alike() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, "n"] x, int64[2] s) => (float y, z) {
        a = Relu (x)
        c = Constant <value = float[2] {1.0, 2.0}> ()
        b = Add (a, c)
        r = Reshape (b, s)
        y, m = Dropout (r)
        z = Identity (m)
    }""")
    typed = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, None])
    untyped = onnx.ValueInfoProto(name="a")  # a repeated entry without a type
    model.graph.value_info.extend([typed, untyped])
    model.graph.initializer.append(helper.make_tensor("s", TensorProto.INT64, [2], [2, -1]))  # also an input
    node = model.graph.node[0]
    node.attribute.extend([helper.make_attribute("names", ["p", "q"]), helper.make_attribute("f", 0.5)])
    graph = _same_import(model)
    assert graph.nodes[0].attrs["names"] == ["p", "q"]


def test_subgraphs_functions_and_bfloat16_go_to_onnx_graphsurgeon(monkeypatch: pytest.MonkeyPatch) -> None:
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["o"])], "b", [],
                               [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2])])
    control = helper.make_model(helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", 1, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))
    bf16 = helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2])]))
    calls = []
    original = gs.import_onnx
    monkeypatch.setattr(fast_import.gs, "import_onnx", lambda m: calls.append(m) or original(m))
    for model in (control, bf16):
        graph = fast_import.import_onnx(model)
        assert calls[-1] is model and [n.op for n in graph.nodes] == [model.graph.node[0].op_type]
    assert np.dtype(np.float32) == fast_import.import_onnx(model_from_text(
        "g (float[2] x) => (float[2] y) { y = Relu (x) }")).inputs[0].dtype and len(calls) == 2


def test_imported_lists_stay_synchronized_when_edited() -> None:
    graph = fast_import.import_onnx(model_from_text("g (float[2] x) => (float[2] y) { a = Relu (x)  y = Neg (a) }"))
    relu, neg = graph.nodes
    x, a = relu.inputs[0], relu.outputs[0]
    assert x.outputs == [relu] and a.inputs == [relu] and a.outputs == [neg]
    extra = gs.Variable("extra", np.float32, [2])
    neg.inputs.append(extra)  # onnx-graphsurgeon's list keeps the other side in step
    assert extra.outputs == [neg]
    neg.inputs.remove(a)
    assert a.outputs == [] and isinstance(neg.inputs, type(gs.Node("Relu").inputs))
    relu.outputs.clear()
    assert a.inputs == []
