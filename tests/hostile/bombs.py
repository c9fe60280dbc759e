"""Memory bombs: tiny models whose constant folding (or whose run in onnxruntime) would need 16 GB or more.

Every op constant folding evaluates gets one. The big tensor is reduced to a scalar before the graph output,
so a correct answer is either "not folded, validated/refused cleanly" (exit 0 or 2), never a crash.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from ._base import case, const_model, graph, init, model, node, vi, write

_BIG = 2**16  # 2**16 x 2**16 float32 = 16 GiB
_I64 = np.int64


def _bomb(name: str, description: str) -> object:
    return case(name, description, None, tags=["bomb"])


def _big_constant(out: str = "big") -> list:
    """Nodes making ``out`` = a FLOAT[2**16, 2**16] of ones (16 GiB) by ConstantOfShape."""
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    return [node("Constant", [], ["shape"], value=helper.make_tensor("s", TensorProto.INT64, [2], [_BIG, _BIG])),
            node("ConstantOfShape", ["shape"], [out], value=value)]


@_bomb("bomb_constantofshape", "ConstantOfShape of [2**16, 2**16] floats (16 GiB)")
def _cos(folder: Path) -> None:
    write(folder, const_model(_big_constant(), [], "big"))


@_bomb("bomb_expand", "Expand of a 1-element constant to [2**16, 2**16]")
def _expand(folder: Path) -> None:
    inits = [init("one", [1.0]), init("shape", [_BIG, _BIG], _I64)]
    write(folder, const_model([node("Expand", ["one", "shape"], ["big"])], inits, "big"))


@_bomb("bomb_tile", "Tile of a 2x2 constant by [2**15, 2**15]")
def _tile(folder: Path) -> None:
    inits = [init("small", np.ones((2, 2))), init("reps", [2**15, 2**15], _I64)]
    write(folder, const_model([node("Tile", ["small", "reps"], ["big"])], inits, "big"))


@_bomb("bomb_range", "Range(0, 2**32, 1) in float (16 GiB)")
def _range(folder: Path) -> None:
    inits = [init("start", 0.0), init("limit", float(2**32)), init("delta", 1.0)]
    write(folder, const_model([node("Range", ["start", "limit", "delta"], ["big"])], inits, "big"))


@_bomb("bomb_mul_broadcast", "Mul of constants [2**16, 1] x [1, 2**16] (two 256 KiB inputs, 16 GiB out)")
def _mul(folder: Path) -> None:
    inits = [init("col", np.ones((_BIG, 1))), init("row", np.ones((1, _BIG)))]
    write(folder, const_model([node("Mul", ["col", "row"], ["big"])], inits, "big"))


@_bomb("bomb_where_broadcast", "Where broadcasting [2**16, 1] and [1, 2**16] constants")
def _where(folder: Path) -> None:
    inits = [init("cond", np.ones((_BIG, 1)), bool), init("row", np.ones((1, _BIG))), init("zero", 0.0)]
    write(folder, const_model([node("Where", ["cond", "row", "zero"], ["big"])], inits, "big"))


@_bomb("bomb_pad", "Pad of a 1x1 constant by 2**16 on both axes")
def _pad(folder: Path) -> None:
    inits = [init("small", np.ones((1, 1))), init("pads", [0, 0, _BIG, _BIG], _I64)]
    write(folder, const_model([node("Pad", ["small", "pads"], ["big"])], inits, "big"))


@_bomb("bomb_resize", "Resize of a [1, 1, 2, 2] constant by scales 2**15")
def _resize(folder: Path) -> None:
    inits = [init("small", np.ones((1, 1, 2, 2))), init("scales", [1, 1, 2**15, 2**15])]
    write(folder, const_model([node("Resize", ["small", "", "scales"], ["big"])], inits, "big"))


@_bomb("bomb_concat_doubling", "Concat of a constant with itself, doubling 32 times (2**32 floats)")
def _concat(folder: Path) -> None:
    nodes = [node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0) for i in range(32)]
    write(folder, const_model(nodes, [init("c0", [1.0])], "c32"))


@_bomb("bomb_onehot", "OneHot of 2**16 indices with depth 2**16")
def _onehot(folder: Path) -> None:
    inits = [init("idx", np.zeros(_BIG), np.int32), init("depth", _BIG, _I64), init("vals", [0.0, 1.0])]
    write(folder, const_model([node("OneHot", ["idx", "depth", "vals"], ["big"])], inits, "big"))


@_bomb("bomb_reshape", "Reshape of a 16 GiB ConstantOfShape to [-1]")
def _reshape(folder: Path) -> None:
    nodes = [*_big_constant("raw"), node("Reshape", ["raw", "flat"], ["big"])]
    write(folder, const_model(nodes, [init("flat", [-1], _I64)], "big"))


@_bomb("bomb_matmul_outer", "MatMul outer product [2**16, 1] @ [1, 2**16]")
def _matmul(folder: Path) -> None:
    inits = [init("col", np.ones((_BIG, 1))), init("row", np.ones((1, _BIG)))]
    write(folder, const_model([node("MatMul", ["col", "row"], ["big"])], inits, "big"))


@_bomb("bomb_gather", "Gather of 2**16 rows from a [1, 2**16] constant")
def _gather(folder: Path) -> None:
    inits = [init("data", np.ones((1, _BIG))), init("idx", np.zeros(_BIG), np.int32)]
    write(folder, const_model([node("Gather", ["data", "idx"], ["big"], axis=0)], inits, "big"))


@_bomb("bomb_einsum", "Einsum i,j->ij of two 2**16 vectors")
def _einsum(folder: Path) -> None:
    inits = [init("a", np.ones(_BIG)), init("b", np.ones(_BIG))]
    write(folder, const_model([node("Einsum", ["a", "b"], ["big"], equation="i,j->ij")], inits, "big"))


@_bomb("bomb_cumsum", "CumSum over a 16 GiB ConstantOfShape")
def _cumsum(folder: Path) -> None:
    nodes = [*_big_constant("raw"), node("CumSum", ["raw", "axis"], ["big"])]
    write(folder, const_model(nodes, [init("axis", 1, _I64)], "big"))


@_bomb("bomb_topk", "TopK (k = 2**16) over a 16 GiB ConstantOfShape")
def _topk(folder: Path) -> None:
    nodes = [*_big_constant("raw"), node("TopK", ["raw", "k"], ["big", "idx"])]
    write(folder, const_model(nodes, [init("k", [_BIG], _I64)], "big"))


@_bomb("bomb_string_expand", "Expand of a string constant to [2**16, 2**16]")
def _strings(folder: Path) -> None:
    inits = [init("s", ["boom"], object), init("shape", [_BIG, _BIG], _I64)]
    nodes = [node("Expand", ["s", "shape"], ["big"]), node("Shape", ["big"], ["shp"]),
             node("ReduceProd", ["shp"], ["n"], keepdims=0), node("Cast", ["n"], ["s_f"], to=TensorProto.FLOAT),
             node("Add", ["x", "s_f"], ["y"])]
    write(folder, model(graph(nodes, [vi("x", [])], [vi("y", [])], inits)))


@_bomb("bomb_many_1gib_folds", "six independent Expand folds of 1 GiB each (6 GiB in all, 1 GiB at a time)")
def _many(folder: Path) -> None:
    nodes, sums = [], []
    for i in range(6):
        nodes += [node("Expand", ["one", "shape"], [f"big{i}"]), node("ReduceSum", [f"big{i}"], [f"s{i}"], keepdims=0)]
        sums.append(f"s{i}")
    nodes += [node("Sum", sums, ["total"]), node("Add", ["x", "total"], ["y"])]
    inits = [init("one", [1.0]), init("shape", [2**28], _I64)]
    write(folder, model(graph(nodes, [vi("x", [])], [vi("y", [])], inits)))


@_bomb("bomb_shape_folding", "ConstantOfShape(Shape(x)) with x declared [2**20, 2**20]: shape folding makes it "
       "constant")
def _shape_fold(folder: Path) -> None:
    nodes = [node("Shape", ["x"], ["shp"]), node("ConstantOfShape", ["shp"], ["big"]),
             node("ReduceSum", ["big"], ["y"], keepdims=0)]
    write(folder, model(graph(nodes, [vi("x", [2**20, 2**20])], [vi("y", [])])))


@_bomb("bomb_dynamic_expand", "Expand of the input x (FLOAT[1]) to [2**16, 2**16]: a bomb for validation only")
def _dyn_expand(folder: Path) -> None:
    nodes = [node("Expand", ["x", "shape"], ["big"]), node("ReduceSum", ["big"], ["y"], keepdims=0)]
    write(folder, model(graph(nodes, [vi("x", [1])], [vi("y", [])], [init("shape", [_BIG, _BIG], _I64)])))


@_bomb("bomb_loop_forever", "a Loop with trip count 2**62 and a constant-true condition (a time bomb)")
def _loop(folder: Path) -> None:
    body = graph([node("Identity", ["cond_in"], ["cond_out"]), node("Add", ["acc_in", "one"], ["acc_out"])],
                 [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [])],
                 [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [])], name="body")
    inits = [init("trips", 2**62, _I64), init("true", True, bool), init("one", 1.0)]
    nodes = [node("Loop", ["trips", "true", "x"], ["y"], body=body)]
    write(folder, model(graph(nodes, [vi("x", [])], [vi("y", [])], inits)))


@_bomb("bomb_between_rlimit_and_ram", "Expand to 3 * 2**29 floats (6 GiB): more than a 4 GiB address space, "
       "less than the machine's RAM")
def _between(folder: Path) -> None:
    inits = [init("one", [1.0]), init("shape", [3 * 2**29], _I64)]
    write(folder, const_model([node("Expand", ["one", "shape"], ["big"])], inits, "big"))
