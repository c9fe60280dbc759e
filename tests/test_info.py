"""gsrewrite.info and ``gsrewrite info``: what a model is made of."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.cli import main
from gsrewrite.info import TensorSpec, model_info
from gsrewrite.model_io import save_model

F = TensorProto.FLOAT


def _model() -> onnx.ModelProto:
    """Initializers (also one listed as a graph input), a Constant, an If, a contrib op and a function."""
    vi = helper.make_tensor_value_info
    then_graph = helper.make_graph(
        [helper.make_node("Mul", ["h", "k"], ["t"])],
        "then",
        [],
        [vi("t", F, None)],
        [numpy_helper.from_array(np.full(4, 2, np.float32), "k")],
    )
    else_graph = helper.make_graph([helper.make_node("Relu", ["h"], ["e"])], "else", [], [vi("e", F, None)])
    nodes = [
        helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0, 4.0]),
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "c"], ["a"]),
        helper.make_node("FastGelu", ["a"], ["h"], domain="com.microsoft"),
        helper.make_node("If", ["cond"], ["r"], then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Twice", ["r"], ["y"], domain="local"),
    ]
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph(
        nodes,
        "g",
        [vi("x", F, ["batch", 4]), vi("cond", TensorProto.BOOL, []), vi("w", F, [4, 4])],
        [vi("y", TensorProto.FLOAT16, ["batch", None])],
        [w],
    )
    twice = helper.make_function(
        "local",
        "Twice",
        ["i"],
        ["o"],
        [helper.make_node("Add", ["i", "i"], ["o"])],
        [helper.make_opsetid("", 17)],
    )
    opsets = [
        helper.make_opsetid("", 17),
        helper.make_opsetid("com.microsoft", 1),
        helper.make_opsetid("local", 1),
    ]
    model = helper.make_model(
        graph, opset_imports=opsets, functions=[twice], producer_name="unit", producer_version="1.2"
    )
    helper.set_model_props(model, {"note": "hello"})
    return model


def test_model_info_summarizes_everything() -> None:
    info = model_info(_model())
    assert (info.producer_name, info.producer_version, info.ir_version) == ("unit", "1.2", onnx.IR_VERSION)
    assert info.opset_imports == {"ai.onnx": 17, "com.microsoft": 1, "local": 1}
    assert info.inputs == [TensorSpec("x", "float", ["batch", 4]), TensorSpec("cond", "bool", [])]
    assert info.outputs == [TensorSpec("y", "float16", ["batch", None])]
    assert (info.node_count, info.node_count_total) == (6, 8)
    assert info.op_histogram == {
        "Add": 1,
        "Constant": 1,
        "If": 1,
        "MatMul": 1,
        "Mul": 1,
        "Relu": 1,
        "com.microsoft.FastGelu": 1,
        "local.Twice": 1,
    }
    assert (info.parameter_count, info.parameter_bytes) == (16 + 4 + 4, (16 + 4 + 4) * 4)
    assert (info.external_data_bytes, info.external_data_files) == (0, [])
    assert info.functions == ["local.Twice"]
    assert info.metadata == {"note": "hello"}


def test_histogram_is_sorted_by_count() -> None:
    model = _model()
    model.graph.node.append(helper.make_node("Relu", ["y"], ["z"]))
    model.graph.output[0].name = "z"
    assert next(iter(model_info(model).op_histogram.items())) == ("Relu", 2)


def test_model_info_from_path_does_not_read_external_data(tmp_path: Path) -> None:
    save_model(_model(), tmp_path / "m.onnx", external_data=True, size_threshold=32)
    info = model_info(tmp_path / "m.onnx")
    assert info.path == str(tmp_path / "m.onnx")
    assert (info.external_data_bytes, info.external_data_files) == (64, ["m.onnx.data"])
    assert info.parameter_bytes == 96  # external tensors are counted from their declared shapes


def test_to_dict_is_json_ready() -> None:
    data = model_info(_model()).to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["inputs"][0] == {"name": "x", "dtype": "float", "shape": ["batch", 4]}


def test_type_names_for_non_tensor_types() -> None:
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.INT64, None)
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["o"])], "g", [seq], [seq])
    graph.output[0].name = "o"
    info = model_info(helper.make_model(graph))
    assert info.inputs == [TensorSpec("s", "seq(int64)", None)]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    save_model(_model(), path)
    return path


def test_cli_json_matches_the_library(saved: Path) -> None:
    result = CliRunner().invoke(main, ["info", str(saved), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    totals = data.pop("totals")
    assert data == model_info(saved).to_dict()
    # the one-line compute total: the library's profile of the same model
    import gsrewrite
    profile = gsrewrite.profile(saved)
    assert totals == {"macs": str(profile.macs), "params": profile.params, "unprofiled": profile.unprofiled,
                      "unknown_symbols": profile.unknown_symbols()}
    assert profile.unprofiled == {}  # the If branches and the local function are profiled too


def test_cli_tables(saved: Path) -> None:
    result = CliRunner().invoke(main, ["info", str(saved)])
    assert result.exit_code == 0, result.output
    for text in ("unit 1.2", "com.microsoft.FastGelu", "[batch, 4]", "[batch, ?]", "local.Twice", "hello"):
        assert text in result.stdout
    assert result.stderr == ""


def test_cli_bad_model_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["info", str(tmp_path / "absent.onnx")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: model file '{tmp_path / 'absent.onnx'}' does not exist"


def test_info_of_large_inline_weights_reads_none_and_calls_them_inline(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose weights are inline and larger than the weightless limit: ``info`` (library and installed
    CLI path) counts them from their declarations as inline parameters, never as external data, and the CLI
    loads the file once."""
    import numpy as np
    from onnx import numpy_helper

    from gsrewrite.model_io import weightless

    weight = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")  # 16 KB: left in the file
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    path = tmp_path / "m.onnx"
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    info = model_info(path)
    assert (info.parameter_count, info.parameter_bytes) == (4096, 16384)
    assert (info.external_data_bytes, info.external_data_files) == (0, [])
    loads = []
    real = weightless.load_weightless

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        loads.append(args)
        return real(*args, **kwargs)

    import gsrewrite.info

    monkeypatch.setattr(weightless, "load_weightless", counted)
    monkeypatch.setattr(gsrewrite.info, "load_weightless", counted)
    result = CliRunner().invoke(main, ["info", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["external_data_bytes"] == 0 and data["totals"]["params"] == 4096
    assert data["totals"]["macs"] == 2 * 64 * 64 and len(loads) == 1
