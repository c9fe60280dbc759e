"""Hostile tensors and dims: huge, negative and zero dims; lying tensors; strings; sparse initializers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from ._base import case, graph, init, model, node, vi, write


def _relu_with_dims(x_shape: list[int], y_shape: list[int], mid_shape: list[int] | None = None) -> object:
    nodes = [node("Relu", ["x"], ["m"]), node("Neg", ["m"], ["y"])]
    value_info = [vi("m", mid_shape)] if mid_shape is not None else []
    return model(graph(nodes, [vi("x", x_shape)], [vi("y", y_shape)], value_info=value_info))


def _dims_case(name: str, description: str, expected: int | None, x: list[int], y: list[int],
               mid: list[int] | None = None, bomb: bool = False) -> None:
    @case(name, description, expected, tags=["bomb"] if bomb else [])
    def build(folder: Path) -> None:
        write(folder, _relu_with_dims(x, y, mid))  # type: ignore[arg-type]


_dims_case("input_dim_2_40", "graph input FLOAT[2**40]", None, [2**40], [2**40], bomb=True)
_dims_case("input_dim_2_62", "graph input FLOAT[2**62, 2**62] (element count overflows int64)", None,
           [2**62, 2**62], [2**62, 2**62], bomb=True)
_dims_case("input_dim_minus_1", "graph input FLOAT[-1, 4]", None, [-1, 4], [-1, 4])
_dims_case("input_dim_minus_7", "graph input FLOAT[-7]", None, [-7], [-7])
_dims_case("input_dim_zero", "graph input FLOAT[0, 4]: an empty tensor", None, [0, 4], [0, 4])
_dims_case("value_info_dim_2_62", "value_info declares the intermediate FLOAT[2**62]", None, [4], [4], [2**62],
           bomb=True)
_dims_case("value_info_dim_minus_7", "value_info declares the intermediate FLOAT[-7]", None, [4], [4], [-7])
_dims_case("output_dim_2_40", "graph output declared FLOAT[2**40] for a FLOAT[4] value", None, [4], [2**40])
_dims_case("output_dim_minus_1", "graph output declared FLOAT[-1]", None, [4], [-1])
_dims_case("output_dim_zero", "graph output declared FLOAT[0] for a FLOAT[4] value", None, [4], [0])


@case("initializer_dims_huge_no_data", "an initializer FLOAT[2**20, 2**20, 2**10] with no data (4 PiB)")
def _init_huge(folder: Path) -> None:
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**20, 2**20, 2**10])
    w.raw_data = b""
    write(folder, model(graph([node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")], [w])))


@case("initializer_negative_dim", "an initializer with dims [-4]")
def _init_negative(folder: Path) -> None:
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-4])
    write(folder, model(graph([node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")], [w])))


@case("initializer_unknown_dtype", "an initializer of element type 999")
def _init_dtype(folder: Path) -> None:
    w = TensorProto(name="w", data_type=999, dims=[4], raw_data=bytes(16))
    write(folder, model(graph([node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")], [w])))


@case("constant_attr_huge_dims", "a Constant whose value attribute declares [2**20, 2**20] with 16 bytes of data")
def _const_attr(folder: Path) -> None:
    value = TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[2**20, 2**20], raw_data=bytes(16))
    nodes = [node("Constant", [], ["w"], value=value), node("Add", ["x", "w"], ["y"])]
    write(folder, model(graph(nodes, [vi("x")], [vi("y")])))


@case("constant_attr_short_data", "a Constant declaring FLOAT[4] with 8 bytes of data")
def _const_short(folder: Path) -> None:
    value = TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[4], raw_data=bytes(8))
    nodes = [node("Constant", [], ["w"], value=value), node("Add", ["x", "w"], ["y"])]
    write(folder, model(graph(nodes, [vi("x")], [vi("y")])))


@case("attribute_tensor_huge_dims", "a ConstantOfShape value attribute declaring [2**30] with one float")
def _attr_tensor(folder: Path) -> None:
    value = TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[2**30], raw_data=bytes(4))
    nodes = [node("ConstantOfShape", ["shape"], ["w"], value=value), node("Add", ["x", "w"], ["y"])]
    write(folder, model(graph(nodes, [vi("x")], [vi("y")], [init("shape", [4], np.int64)])))


@case("string_tensors", "a string input, a string initializer and a string output (Concat of strings)", None)
def _strings(folder: Path) -> None:
    s = TensorProto.STRING
    nodes = [node("Concat", ["x", "w"], ["y"], axis=0)]
    g = graph(nodes, [vi("x", [2], s)], [vi("y", [4], s)], [init("w", ["a", "\u00e9"], object)])
    write(folder, model(g))


@case("sparse_initializer", "a weight given as a sparse initializer", None)
def _sparse(folder: Path) -> None:
    values = init("w", [5.0])
    indices = init("w_idx", [2], np.int64)
    sparse = helper.make_sparse_tensor(values, indices, [4])
    g = graph([node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")])
    g.sparse_initializer.append(sparse)
    write(folder, model(g))


@case("sparse_initializer_bad_index", "a sparse initializer whose index 99 is outside its dims [4]", read_exit=None)
def _sparse_bad(folder: Path) -> None:
    sparse = helper.make_sparse_tensor(init("w", [5.0]), init("w_idx", [99], np.int64), [4])
    g = graph([node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")])
    g.sparse_initializer.append(sparse)
    write(folder, model(g))


@case("sparse_initializer_huge_dims", "a sparse initializer of dims [2**40] with one value", read_exit=None,
      tags=["bomb"])
def _sparse_huge(folder: Path) -> None:
    sparse = helper.make_sparse_tensor(init("w", [5.0]), init("w_idx", [1], np.int64), [2**40])
    g = graph([node("Add", ["x", "w"], ["y"])], [vi("x", [2**40])], [vi("y", [2**40])])
    g.sparse_initializer.append(sparse)
    write(folder, model(g))
