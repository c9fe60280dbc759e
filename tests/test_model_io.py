"""gsrewrite.model_io: checked loading, atomic and non-destructive saving, external data, IR clamping."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.errors import ExternalDataError, InvalidModelError, ModelNotFoundError, ModelTooLargeError, OutputError
from gsrewrite.model_io import (
    PROTOBUF_LIMIT,
    check_output_path,
    check_structure,
    load_model,
    load_model_bytes,
    max_ir_version,
    needs_external_data,
    over_protobuf_limit,
    save_model,
    saving,
    stored_size,
)
from gsrewrite.model_io import external_data as external_data_module
from gsrewrite.model_io.ir_version import ir_version_from_table

F = TensorProto.FLOAT


def _rich_model() -> onnx.ModelProto:
    """y = Relu(x @ w + b) through a local function, with metadata, value_info and doc strings everywhere."""
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, "w")
    b = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm", doc_string="matmul doc"),
        helper.make_node("AddRelu", ["xw", "b"], ["y"], name="fn", domain="local"),
    ]
    graph = helper.make_graph(
        nodes,
        "rich",
        [helper.make_tensor_value_info("x", F, ["batch", 8])],
        [helper.make_tensor_value_info("y", F, ["batch", 8])],
        [w, b],
        doc_string="graph doc",
        value_info=[helper.make_tensor_value_info("xw", F, ["batch", 8])],
    )
    function = helper.make_function(
        "local",
        "AddRelu",
        ["a", "c"],
        ["out"],
        [helper.make_node("Add", ["a", "c"], ["s"]), helper.make_node("Relu", ["s"], ["out"])],
        [helper.make_opsetid("", 17)],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[function],
        producer_name="tests",
        producer_version="9.9",
        doc_string="model doc",
        model_version=3,
        domain="ai.test",
    )
    helper.set_model_props(model, {"author": "gsrewrite", "license": "MIT"})
    return model


def _run(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.ones((2, 8), np.float32)})[0]


def _same_except_ir(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    a_copy, b_copy = onnx.ModelProto(), onnx.ModelProto()
    a_copy.CopyFrom(a)
    b_copy.CopyFrom(b)
    a_copy.ir_version = b_copy.ir_version = 0
    return a_copy == b_copy


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# --- round trips and preservation -------------------------------------------------------------------
def test_round_trip_keeps_everything_but_ir_version(tmp_path: Path) -> None:
    model = _rich_model()
    save_model(model, tmp_path / "m.onnx")
    loaded = load_model(tmp_path / "m.onnx")
    assert _same_except_ir(loaded, model)
    assert {p.key: p.value for p in loaded.metadata_props} == {"author": "gsrewrite", "license": "MIT"}
    assert [f.name for f in loaded.functions] == ["AddRelu"]
    assert [v.name for v in loaded.graph.value_info] == ["xw"]
    assert (loaded.doc_string, loaded.graph.doc_string, loaded.graph.node[0].doc_string) == (
        "model doc",
        "graph doc",
        "matmul doc",
    )
    assert (loaded.producer_name, loaded.producer_version, loaded.model_version) == ("tests", "9.9", 3)


def test_load_model_bytes_round_trip() -> None:
    model = _rich_model()
    assert load_model_bytes(model.SerializeToString()) == model


def test_save_does_not_mutate_the_callers_model(tmp_path: Path) -> None:
    model = _rich_model()
    before = model.SerializeToString()
    save_model(model, tmp_path / "m.onnx", external_data=True, size_threshold=16)
    assert model.SerializeToString() == before


# --- IR version -------------------------------------------------------------------------------------
def test_ir_version_is_clamped_to_what_onnxruntime_accepts(tmp_path: Path) -> None:
    model = _rich_model()
    assert model.ir_version == onnx.IR_VERSION  # onnx.helper stamps its newest IR version
    save_model(model, tmp_path / "m.onnx")
    saved = onnx.load(tmp_path / "m.onnx")
    assert saved.ir_version == min(onnx.IR_VERSION, max_ir_version())
    expected = np.maximum(np.ones(8) @ (np.arange(64).reshape(8, 8) / 64) + np.linspace(-1, 1, 8), 0)
    np.testing.assert_allclose(_run(tmp_path / "m.onnx")[0], expected, rtol=1e-5)


def test_ir_version_is_never_raised(tmp_path: Path) -> None:
    model = _rich_model()
    model.ir_version = 8
    save_model(model, tmp_path / "m.onnx")
    assert onnx.load(tmp_path / "m.onnx").ir_version == 8


def test_known_ir_version_needs_no_onnxruntime_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gsrewrite.model_io import ir_version as module

    def no_probe() -> int:
        raise AssertionError("probed onnxruntime for an IR version the table already covers")

    monkeypatch.setattr(module, "max_ir_version", no_probe)
    assert module.known_ir_version() >= 9  # every onnxruntime this package supports (>= 1.17) reads IR 9
    model = _rich_model()
    model.ir_version = 9
    save_model(model, tmp_path / "m.onnx")
    assert onnx.load(tmp_path / "m.onnx").ir_version == 9


def test_probed_ir_version_is_plausible() -> None:
    assert 7 <= max_ir_version() <= onnx.IR_VERSION
    assert max_ir_version() is max_ir_version()  # cached


@pytest.mark.parametrize(
    ("ort_version", "expected"), [("1.31.1", 13), ("1.40.0", 13), ("1.20.1", 10), ("1.16.3", 9), ("x.y", 7)]
)
def test_ir_version_fallback_table(ort_version: str, expected: int) -> None:
    assert ir_version_from_table(ort_version) == expected


# --- atomic writes ----------------------------------------------------------------------------------
def test_failed_write_leaves_target_untouched_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "m.onnx"
    target.write_bytes(b"old content")

    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(saving.os, "fsync", broken_fsync)
    with pytest.raises(OutputError, match="simulated I/O error"):
        save_model(_rich_model(), target)
    assert target.read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_only_a_replaced_file_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # durability where old content is at stake; a new file costs no disk flush
    synced: list[int] = []
    real_fsync = saving.os.fsync
    monkeypatch.setattr(saving.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    target = tmp_path / "m.onnx"
    save_model(_rich_model(), target)
    assert synced == [] and onnx.load(target).graph.node
    save_model(_rich_model(), target)
    assert len(synced) == 2  # the new content, then the folder holding the rename


def test_failure_while_writing_external_data_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_move = saving._move_tensors

    def move_then_fail(model: onnx.ModelProto, f: BinaryIO, location: str, size_threshold: int) -> None:
        real_move(model, f, location, size_threshold)
        raise OSError(errno.ENOSPC, "simulated full disk")

    monkeypatch.setattr(saving, "_move_tensors", move_then_fail)
    with pytest.raises(OutputError, match=f"cannot write 'm.onnx.data' in '{tmp_path}': no space left on the device"):
        save_model(_rich_model(), tmp_path / "m.onnx", external_data=True, size_threshold=16)
    assert list(tmp_path.iterdir()) == []


def test_new_file_gets_normal_permissions(tmp_path: Path) -> None:
    save_model(_rich_model(), tmp_path / "m.onnx")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "m.onnx").stat().st_mode & 0o777 == 0o666 & ~umask
    assert _leftovers(tmp_path) == []


# --- refusing to overwrite --------------------------------------------------------------------------
def test_refuses_to_overwrite_the_input(tmp_path: Path) -> None:
    source = tmp_path / "m.onnx"
    save_model(_rich_model(), source)
    before = source.read_bytes()
    (tmp_path / "link.onnx").symlink_to(source)
    for target in (source, tmp_path / "." / "m.onnx", tmp_path / "link.onnx"):
        with pytest.raises(OutputError, match="refusing to overwrite the input model"):
            save_model(_rich_model(), target, input_path=source)
    assert source.read_bytes() == before


def test_in_place_overwrites_the_input(tmp_path: Path) -> None:
    source = tmp_path / "m.onnx"
    save_model(_rich_model(), source)
    model = load_model(source)
    model.producer_name = "rewritten"
    save_model(model, source, input_path=source, in_place=True)
    assert load_model(source).producer_name == "rewritten"
    assert _leftovers(tmp_path) == []


def test_refuses_missing_folder_and_directory_target(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="does not exist"):
        save_model(_rich_model(), tmp_path / "nowhere" / "m.onnx")
    with pytest.raises(OutputError, match="is a directory"):
        save_model(_rich_model(), tmp_path)


def test_check_output_path_fails_before_any_work(tmp_path: Path) -> None:
    source = tmp_path / "m.onnx"
    source.write_bytes(b"input")
    assert check_output_path(tmp_path / "out.onnx", input_path=source) == str(tmp_path / "out.onnx")
    assert check_output_path(source, input_path=source, in_place=True) == str(source)
    with pytest.raises(OutputError, match="refusing to overwrite the input model"):
        check_output_path(source, input_path=source)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_refuses_to_overwrite_the_inputs_external_data(tmp_path: Path) -> None:
    source = tmp_path / "m.onnx"
    save_model(_rich_model(), source, external_data=True, size_threshold=16)
    data_before = (tmp_path / "m.onnx.data").read_bytes()
    model = load_model(source)
    with pytest.raises(OutputError, match="belongs to the input model"):
        save_model(
            model, tmp_path / "out.onnx", input_path=source, external_data=True, location="m.onnx.data"
        )
    assert (tmp_path / "m.onnx.data").read_bytes() == data_before


def test_refuses_saving_unloaded_external_data(tmp_path: Path) -> None:
    save_model(_rich_model(), tmp_path / "m.onnx", external_data=True, size_threshold=16)
    model = load_model(tmp_path / "m.onnx", load_external_data=False)
    with pytest.raises(OutputError, match="initializer 'w' still refers to external data"):
        save_model(model, tmp_path / "out.onnx")


# --- external data ----------------------------------------------------------------------------------
def test_external_data_save_and_reload(tmp_path: Path) -> None:
    model = _rich_model()
    save_model(model, tmp_path / "m.onnx", external_data=True, size_threshold=64)
    raw = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    locations = {t.name: t.data_location for t in raw.graph.initializer}
    assert locations == {"w": TensorProto.EXTERNAL, "b": TensorProto.DEFAULT}  # b has 32 bytes < 64
    assert (tmp_path / "m.onnx.data").stat().st_size == 64 * 4
    reloaded = load_model(tmp_path / "m.onnx")
    assert _same_except_ir(reloaded, model)
    assert _run(tmp_path / "m.onnx").shape == (2, 8)


def test_given_serialized_bytes_are_written_unless_a_new_serialization_is_needed(tmp_path: Path) -> None:
    model = _rich_model()
    model.ir_version = onnx.IR_VERSION if ir_version_from_table(ort.__version__) >= onnx.IR_VERSION else 7
    data = model.SerializeToString()
    assert save_model(model, tmp_path / "a.onnx", serialized=data) == len(data)
    assert (tmp_path / "a.onnx").read_bytes() == data
    save_model(model, tmp_path / "b.onnx", serialized=data, external_data=True, size_threshold=64)
    assert (tmp_path / "b.onnx.data").exists() and (tmp_path / "b.onnx").read_bytes() != data
    too_new = onnx.ModelProto()
    too_new.CopyFrom(model)
    too_new.ir_version = 99  # clamped on save: the given bytes (IR 99) cannot be written as they are
    save_model(too_new, tmp_path / "c.onnx", serialized=too_new.SerializeToString())
    assert onnx.load(tmp_path / "c.onnx").ir_version < 99


def test_external_data_custom_location_and_bad_locations(tmp_path: Path) -> None:
    save_model(_rich_model(), tmp_path / "m.onnx", external_data=True, size_threshold=16, location="w.bin")
    assert (tmp_path / "w.bin").exists()
    assert _same_except_ir(load_model(tmp_path / "m.onnx"), _rich_model())
    for bad in ("../w.bin", "sub/w.bin", "/tmp/w.bin", "..", "m.onnx"):
        with pytest.raises(OutputError):
            save_model(_rich_model(), tmp_path / "m.onnx", external_data=True, location=bad)


def test_external_data_decision() -> None:
    assert needs_external_data(PROTOBUF_LIMIT + 1, None) is True
    assert needs_external_data(PROTOBUF_LIMIT, None) is False
    assert needs_external_data(100, True) is True
    assert needs_external_data(100, False) is False
    with pytest.raises(OutputError, match="2 GB protobuf limit"):
        needs_external_data(3 * 2**30, False)


def test_over_protobuf_limit_counts_tensors_and_structure() -> None:
    model = _rich_model()  # 72 floats of tensors (288 bytes) plus nodes, names and a function
    size = model.ByteSize()
    assert not over_protobuf_limit(model)
    assert over_protobuf_limit(model, limit=200)  # the tensors alone are over it
    assert over_protobuf_limit(model, limit=size - 1)  # near the limit protobuf counts the structure too
    assert not over_protobuf_limit(model, limit=size)


def test_stored_size_counts_external_data(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((128, 128), np.float32), "w")  # 64 KB of weights
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [1, 128])],
                              [helper.make_tensor_value_info("y", F, [1, 128])], [w])
    model = helper.make_model(graph)
    save_model(model, tmp_path / "inline.onnx")
    save_model(model, tmp_path / "split.onnx", external_data=True)
    inline = load_model(tmp_path / "inline.onnx")
    assert stored_size(tmp_path / "inline.onnx", inline) == (tmp_path / "inline.onnx").stat().st_size
    split = load_model(tmp_path / "split.onnx")
    assert (tmp_path / "split.onnx").stat().st_size < 1024  # the weights are elsewhere
    assert stored_size(tmp_path / "split.onnx", split) == split.ByteSize() > 65536


def test_large_model_switches_to_external_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(saving, "PROTOBUF_LIMIT", 200)  # pretend the model is above 2 GB
    save_model(_rich_model(), tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx.data").exists()
    assert _same_except_ir(load_model(tmp_path / "m.onnx"), _rich_model())


def test_external_data_in_subfolder_and_internal_symlink_are_accepted(tmp_path: Path) -> None:
    save_model(_rich_model(), tmp_path / "m.onnx", external_data=True, size_threshold=16, location="w.bin")
    (tmp_path / "weights").mkdir()
    os.replace(tmp_path / "w.bin", tmp_path / "weights" / "w.bin")
    (tmp_path / "alias.bin").symlink_to(tmp_path / "weights" / "w.bin")
    raw = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    for location in ("weights/w.bin", "alias.bin"):
        for tensor in raw.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = location
        (tmp_path / "m.onnx").write_bytes(raw.SerializeToString())
        assert _same_except_ir(load_model(tmp_path / "m.onnx"), _rich_model())


def test_external_data_needs_a_folder_when_loading_bytes(tmp_path: Path) -> None:
    save_model(_rich_model(), tmp_path / "m.onnx", external_data=True, size_threshold=16)
    data = (tmp_path / "m.onnx").read_bytes()
    with pytest.raises(ExternalDataError, match="no model folder"):
        load_model_bytes(data)
    assert _same_except_ir(load_model_bytes(data, base_dir=tmp_path), _rich_model())


def test_external_data_larger_than_available_memory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_model(_rich_model(), tmp_path / "m.onnx", external_data=True, size_threshold=16)
    monkeypatch.setattr(external_data_module, "available_memory", lambda: 100)
    with pytest.raises(ModelTooLargeError, match="only 100 bytes of memory"):
        load_model(tmp_path / "m.onnx")
    load_model(tmp_path / "m.onnx", load_external_data=False)  # nothing is read, nothing refused


# --- tensor checks ----------------------------------------------------------------------------------
def _model_with(tensor: TensorProto) -> onnx.ModelProto:
    node = helper.make_node("Identity", [tensor.name], ["y"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", tensor.data_type, None)])
    graph.initializer.append(tensor)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "tensor",
    [
        helper.make_tensor("f16", TensorProto.FLOAT16, [3], np.ones(3, np.float16)),
        helper.make_tensor("f16raw", TensorProto.FLOAT16, [3], np.ones(3, np.float16).tobytes(), raw=True),
        helper.make_tensor("i4", TensorProto.INT4, [3], [1, -2, 3]),
        numpy_helper.from_array(np.ones(3, np.complex64), "c64"),
        helper.make_tensor("c64t", TensorProto.COMPLEX64, [2], [1 + 2j, 3 + 4j]),
        helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"bc"]),
        helper.make_tensor("empty", F, [0, 4], []),
        helper.make_tensor("scalar", F, [], [1.5]),
    ],
    ids=lambda t: t.name,
)
def test_consistent_tensors_load(tensor: TensorProto) -> None:
    load_model_bytes(_model_with(tensor).SerializeToString())


def test_tensor_size_cap_is_configurable() -> None:
    data = _model_with(numpy_helper.from_array(np.zeros(100, np.float32), "w")).SerializeToString()
    with pytest.raises(ModelTooLargeError, match="initializer 'w' declares shape \\[100\\]"):
        load_model_bytes(data, max_tensor_bytes=399)
    load_model_bytes(data, max_tensor_bytes=400)


def test_constant_node_tensor_is_checked() -> None:
    bad = TensorProto(name="v", data_type=F, dims=[2], float_data=[1.0])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], name="const", value=bad)],
        "g",
        [],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = helper.make_model(graph)
    with pytest.raises(InvalidModelError, match="attribute 'value' of node 'const' \\(Constant\\)"):
        load_model_bytes(model.SerializeToString())


# --- structure --------------------------------------------------------------------------------------
def _nested_if_model(inner_reads: str) -> onnx.ModelProto:
    """x -> If(then: If(then: Identity(inner_reads))) -> y; the innermost branch reads an outer value."""
    vi = helper.make_tensor_value_info
    inner_then = helper.make_graph(
        [helper.make_node("Identity", [inner_reads], ["it"])], "it", [], [vi("it", F, None)]
    )
    inner_else = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["ie"])], "ie", [], [vi("ie", F, None)]
    )
    inner_if = helper.make_node("If", ["cond"], ["o"], then_branch=inner_then, else_branch=inner_else)
    outer_then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["local"]), inner_if], "ot", [], [vi("o", F, None)]
    )
    outer_else = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["oe"])], "oe", [], [vi("oe", F, None)]
    )
    outer_if = helper.make_node(
        "If", ["cond"], ["y"], name="outer", then_branch=outer_then, else_branch=outer_else
    )
    graph = helper.make_graph(
        [outer_if], "g", [vi("x", F, [2]), vi("cond", TensorProto.BOOL, [])], [vi("y", F, None)]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("reads", ["x", "local", "cond"])
def test_subgraphs_may_read_every_enclosing_scope(reads: str) -> None:
    check_structure(_nested_if_model(reads))


def test_subgraph_cannot_read_a_sibling_branchs_value() -> None:
    with pytest.raises(InvalidModelError, match=r"reads 'oe', which is not .* enclosing graph"):
        check_structure(_nested_if_model("oe"))


def test_function_bodies_are_checked() -> None:
    model = _rich_model()
    model.functions[0].node[1].input[0] = "missing"
    with pytest.raises(InvalidModelError, match=r"in function 'local\.AddRelu' reads 'missing'"):
        check_structure(model)


def test_node_output_may_not_shadow_an_initializer() -> None:
    model = _rich_model()
    model.graph.node[0].output[0] = "b"
    with pytest.raises(
        InvalidModelError, match="produces 'b', which is already a graph input or initializer"
    ):
        check_structure(model)


def test_unsorted_but_acyclic_graph_is_accepted() -> None:
    model = _rich_model()
    model.graph.node.reverse()
    check_structure(model)


def test_tensor_protos_visits_what_iter_tensors_visits() -> None:
    from gsrewrite.model_io.graph_walk import iter_tensors, tensor_protos

    def const(name: str, value: float) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.float32([value]), name))

    branch = helper.make_graph([const("k", 1.0), helper.make_node("Add", ["k", "bw"], ["o"])], "branch", [],
                               [helper.make_tensor_value_info("o", F, [1])],
                               [numpy_helper.from_array(np.float32([2.0]), "bw")])
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.float32([5.0]), "sv"),
                                       numpy_helper.from_array(np.int64([1]), "si"), [3])
    graph = helper.make_graph(
        [const("c", 3.0), helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch),
         helper.make_node("Constant", [], ["s"], sparse_value=sparse)],
        "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", F, [1])], [numpy_helper.from_array(np.float32([4.0]), "w")])
    model = helper.make_model(graph, functions=[helper.make_function(
        "local", "F", ["a"], ["b"], [const("fc", 6.0), helper.make_node("Add", ["a", "fc"], ["b"])],
        [helper.make_opsetid("", 17)])])
    fast = sorted(t.SerializeToString() for t in tensor_protos(model))
    labelled = sorted(t.SerializeToString() for t, _ in iter_tensors(model))
    assert fast == labelled and len(fast) == 9  # w, c, 2 x (bw, k), sparse values + indices, fc


def test_graph_walks_find_subgraphs_of_control_flow_and_custom_ops() -> None:
    from gsrewrite.model_io.graph_walk import iter_graphs, iter_nodes

    inner = helper.make_graph([helper.make_node("Neg", ["a"], ["b"])], "inner", [],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["o"]),
                                helper.make_node("MyLoop", [], ["p"], domain="my.ops", body=inner)], "branch", [],
                               [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])])
    main = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch),
                              helper.make_node("Relu", ["x"], ["z"])], "main",
                             [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(main)
    names = [g.name for g, _ in iter_graphs(model)]
    assert names == ["main", "branch", "inner", "branch", "inner"]
    assert sorted(n.op_type for n in iter_nodes(model)) == sorted(
        ["If", "Relu", "Relu", "MyLoop", "Neg", "Relu", "MyLoop", "Neg"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_fifo_swapped_in_after_the_path_checks_is_refused_not_waited_on(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The path checks see a regular file; a named pipe replaces it before the open: the open does not block and
    the descriptor is checked (before, open() waited for a writer that never comes)."""
    from gsrewrite.model_io import loading

    path = tmp_path / "m.onnx"
    path.write_bytes(b"x")
    checks = loading._read_file_checks

    def then_swap(name: str) -> None:
        checks(name)
        os.remove(name)
        os.mkfifo(name)

    monkeypatch.setattr(loading, "_read_file_checks", then_swap)
    with pytest.raises(ModelNotFoundError, match="named pipe, not a regular file"):
        load_model(path)
