"""A corpus of malformed ONNX models, built by code, for testing that bad input fails cleanly.

``build_corpus(folder)`` writes every case into its own subfolder of ``folder`` and returns
:class:`MalformedCase` records: the case name, the path to hand to ``load_model`` or the CLI, the typed
exception expected, and a one-line reason. Each builder starts from a small valid model and breaks one
thing, so a case fails for exactly the reason it names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, ValueInfoProto, helper, numpy_helper

from gsrewrite.errors import (
    ExternalDataError,
    GsrewriteError,
    InvalidModelError,
    ModelNotFoundError,
    ModelTooLargeError,
    NotAnOnnxModelError,
)

MODEL_FILE = "model.onnx"


@dataclass(frozen=True)
class MalformedCase:
    """One malformed input: where it is, what load_model must raise, and why."""

    name: str
    path: Path
    error: type[GsrewriteError]
    reason: str


_Builder = Callable[[Path], None]
_CASES: list[tuple[str, type[GsrewriteError], str, _Builder]] = []


def _case(name: str, error: type[GsrewriteError], reason: str) -> Callable[[_Builder], _Builder]:
    def register(builder: _Builder) -> _Builder:
        _CASES.append((name, error, reason, builder))
        return builder

    return register


def build_corpus(folder: str | os.PathLike[str]) -> list[MalformedCase]:
    """Write every malformed case under ``folder`` (one subfolder each) and describe them."""
    cases = []
    for name, error, reason, builder in _CASES:
        case_dir = Path(folder) / name
        case_dir.mkdir(parents=True, exist_ok=True)
        path = case_dir / MODEL_FILE
        builder(path)
        cases.append(MalformedCase(name, path, error, reason))
    return cases


# --- building blocks --------------------------------------------------------------------------------
def _vi(name: str, shape: list[int] | None = None) -> ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape if shape is not None else [4])


def _model(nodes: list, inputs: list, outputs: list, initializers: list | None = None) -> ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _add_model(weight: TensorProto) -> ModelProto:
    """y = x + w, with ``w`` supplied by the caller (possibly broken)."""
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x")], [_vi("y")], [weight])


def _valid_model() -> ModelProto:
    return _add_model(numpy_helper.from_array(np.arange(4, dtype=np.float32), "w"))


def _write(path: Path, model: ModelProto) -> None:
    path.write_bytes(model.SerializeToString())


def _raw_tensor(dims: list[int], raw: bytes, data_type: int = TensorProto.FLOAT) -> TensorProto:
    tensor = TensorProto(name="w", data_type=data_type, dims=dims)
    tensor.raw_data = raw
    return tensor


def _external_tensor(location: str, offset: int = 0, length: int = 16) -> TensorProto:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)
    return tensor


def _if_node(then_reads: str, output: str = "r", name: str = "if") -> NodeProto:
    then_graph = helper.make_graph(
        [helper.make_node("Identity", [then_reads], ["t"])], "then", [], [_vi("t")]
    )
    else_graph = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e")])
    return helper.make_node(
        "If", ["cond"], [output], name=name, then_branch=then_graph, else_branch=else_graph
    )


_COND = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])


# --- files that are not models ----------------------------------------------------------------------
@_case("missing_file", ModelNotFoundError, "the path does not exist")
def _missing(path: Path) -> None:
    pass


@_case("directory", ModelNotFoundError, "the path is a directory")
def _directory(path: Path) -> None:
    path.mkdir()


@_case("empty_file", NotAnOnnxModelError, "the file has zero bytes")
def _empty(path: Path) -> None:
    path.write_bytes(b"")


@_case("not_protobuf", NotAnOnnxModelError, "the file is text, not a protobuf")
def _text(path: Path) -> None:
    path.write_bytes(b"This is not an ONNX model, just text.\n")


@_case("truncated", NotAnOnnxModelError, "a valid model cut in half")
def _truncated(path: Path) -> None:
    data = _add_model(numpy_helper.from_array(np.zeros(64, np.float32), "w")).SerializeToString()
    path.write_bytes(data[: len(data) // 2])


@_case("graph_not_model", NotAnOnnxModelError, "a serialized GraphProto, a protobuf that is no ModelProto")
def _graph_proto(path: Path) -> None:
    path.write_bytes(_valid_model().graph.SerializeToString())


@_case("model_without_graph", InvalidModelError, "a ModelProto with IR version and opsets but no graph")
def _no_graph(path: Path) -> None:
    model = _valid_model()
    model.ClearField("graph")
    _write(path, model)


# --- external data ----------------------------------------------------------------------------------
@_case("external_missing_file", ExternalDataError, "external data file does not exist")
def _ext_missing(path: Path) -> None:
    _write(path, _add_model(_external_tensor("weights.bin")))


@_case("external_absolute_path", ExternalDataError, "external data location is an absolute path")
def _ext_absolute(path: Path) -> None:
    target = path.parent / "weights.bin"
    target.write_bytes(bytes(16))
    _write(path, _add_model(_external_tensor(str(target.resolve()))))


@_case("external_parent_escape", ExternalDataError, "external data location climbs out with ../")
def _ext_parent(path: Path) -> None:
    (path.parent.parent / "secret_parent.bin").write_bytes(bytes(16))
    _write(path, _add_model(_external_tensor("../secret_parent.bin")))


@_case("external_symlink_escape", ExternalDataError, "external data is a symlink pointing outside")
def _ext_symlink(path: Path) -> None:
    secret = path.parent.parent / "secret_link.bin"
    secret.write_bytes(bytes(16))
    os.symlink(secret, path.parent / "weights.bin")
    _write(path, _add_model(_external_tensor("weights.bin")))


@_case("external_offset_beyond_file", ExternalDataError, "offset + length lie past the end of the file")
def _ext_offset(path: Path) -> None:
    (path.parent / "weights.bin").write_bytes(bytes(16))
    _write(path, _add_model(_external_tensor("weights.bin", offset=1000)))


@_case("external_length_mismatch", ExternalDataError, "external length differs from shape x dtype")
def _ext_length(path: Path) -> None:
    (path.parent / "weights.bin").write_bytes(bytes(64))
    _write(path, _add_model(_external_tensor("weights.bin", length=8)))


# --- tensors ----------------------------------------------------------------------------------------
@_case("raw_data_length_mismatch", InvalidModelError, "raw_data has 8 bytes for a FLOAT[4] tensor")
def _raw_mismatch(path: Path) -> None:
    _write(path, _add_model(_raw_tensor([4], bytes(8))))


@_case("typed_data_length_mismatch", InvalidModelError, "float_data has 3 values for a FLOAT[4] tensor")
def _typed_mismatch(path: Path) -> None:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], float_data=[1.0, 2.0, 3.0])
    _write(path, _add_model(tensor))


@_case("negative_dimension", InvalidModelError, "an initializer with a negative dimension")
def _negative(path: Path) -> None:
    _write(path, _add_model(_raw_tensor([-4], b"")))


@_case("huge_declared_tensor", ModelTooLargeError, "an initializer declaring 4 PiB with no data")
def _huge(path: Path) -> None:
    _write(path, _add_model(_raw_tensor([2**20, 2**20, 2**10], b"")))


@_case("unknown_dtype", InvalidModelError, "an initializer with element type 999")
def _dtype(path: Path) -> None:
    _write(path, _add_model(_raw_tensor([4], bytes(16), data_type=999)))


# --- graph structure --------------------------------------------------------------------------------
@_case("cycle", InvalidModelError, "two nodes feeding each other")
def _cycle(path: Path) -> None:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Identity", ["a"], ["y"], name="out"),
    ]
    _write(path, _model(nodes, [_vi("x")], [_vi("y")]))


@_case("cycle_through_subgraph", InvalidModelError, "an If branch reads a value computed from the If")
def _subgraph_cycle(path: Path) -> None:
    nodes = [_if_node("late"), helper.make_node("Relu", ["r"], ["late"], name="late_relu")]
    _write(path, _model(nodes, [_vi("x"), _COND], [_vi("late")]))


@_case("dangling_input", InvalidModelError, "a node reads a tensor nothing produces")
def _dangling(path: Path) -> None:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    _write(path, _model(nodes, [_vi("x")], [_vi("y")]))


@_case("dangling_subgraph_input", InvalidModelError, "an If branch reads a name unknown in every scope")
def _dangling_sub(path: Path) -> None:
    _write(path, _model([_if_node("ghost")], [_vi("x"), _COND], [_vi("r")]))


@_case("dangling_graph_output", InvalidModelError, "a graph output nothing produces")
def _dangling_output(path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    _write(path, _model(nodes, [_vi("x")], [_vi("y"), _vi("z")]))


@_case("duplicate_producer", InvalidModelError, "two nodes produce the same tensor")
def _duplicate_producer(path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Neg", ["x"], ["y"], name="neg"),
    ]
    _write(path, _model(nodes, [_vi("x")], [_vi("y")]))


@_case("duplicate_graph_output", InvalidModelError, "the graph lists the same output twice")
def _duplicate_output(path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    _write(path, _model(nodes, [_vi("x")], [_vi("y"), _vi("y")]))


#: Every case name, in corpus order (usable at collection time for parametrization).
CASE_NAMES: list[str] = [name for name, *_ in _CASES]


def len_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2) written by hand, for files protobuf would not write."""
    out, size = bytearray([number << 3 | 2]), len(payload)
    while True:
        out.append((size & 0x7F) | (0x80 if size > 0x7F else 0))
        size >>= 7
        if not size:
            return bytes(out) + payload
