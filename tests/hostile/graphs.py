"""Hostile graphs: cycles, shadowed names, deep nesting, recursion, versions, odd names and odd tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import GraphProto, ModelProto, TensorProto, helper

from ._base import case, graph, init, model, node, relu_model, vi, write

_COND = vi("c", [], TensorProto.BOOL)


def _branches(then_reads: str, then_out: str = "t", else_out: str = "e") -> tuple[GraphProto, GraphProto]:
    then_g = graph([node("Identity", [then_reads], [then_out])], [], [vi(then_out)], name="then")
    else_g = graph([node("Identity", ["x"], [else_out])], [], [vi(else_out)], name="else")
    return then_g, else_g


# --- cycles and names -------------------------------------------------------------------------------
@case("self_loop", "a node reads its own output")
def _self_loop(folder: Path) -> None:
    nodes = [node("Add", ["x", "a"], ["a"]), node("Relu", ["a"], ["y"])]
    write(folder, model(graph(nodes, [vi("x")], [vi("y")])))


@case("cycle_three_nodes", "three nodes feeding each other in a ring")
def _cycle(folder: Path) -> None:
    nodes = [node("Add", ["x", "c3"], ["c1"]), node("Relu", ["c1"], ["c2"]), node("Neg", ["c2"], ["c3"]),
             node("Identity", ["c2"], ["y"])]
    write(folder, model(graph(nodes, [vi("x")], [vi("y")])))


@case("cycle_through_if", "an If branch reads a value computed from the If's own output")
def _cycle_if(folder: Path) -> None:
    then_g, else_g = _branches("late")
    nodes = [node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g), node("Relu", ["r"], ["late"])]
    write(folder, model(graph(nodes, [vi("x"), _COND], [vi("late")])))


@case("two_writers", "two nodes write the same tensor")
def _two_writers(folder: Path) -> None:
    nodes = [node("Relu", ["x"], ["y"], name="a"), node("Neg", ["x"], ["y"], name="b")]
    write(folder, model(graph(nodes, [vi("x")], [vi("y")])))


@case("node_writes_graph_input", "a node writes the tensor that is also a graph input")
def _writes_input(folder: Path) -> None:
    nodes = [node("Relu", ["y"], ["x"]), node("Neg", ["x"], ["y"])]
    write(folder, model(graph(nodes, [vi("x")], [vi("y")])))


@case("initializer_shadows_input", "an initializer has the name of a graph input (a default value)", None)
def _shadow_input(folder: Path) -> None:
    g = graph([node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")], [init("x", np.arange(4))])
    write(folder, model(g))


@case("node_writes_initializer", "a node writes a tensor that is also an initializer")
def _writes_init(folder: Path) -> None:
    g = graph([node("Relu", ["x"], ["w"]), node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")],
              [init("w", np.ones(4))])
    write(folder, model(g))


@case("subgraph_shadows_outer", "an If branch produces a tensor named like an outer tensor")
def _shadow_outer(folder: Path) -> None:
    then_g, else_g = _branches("x", then_out="x", else_out="x")
    nodes = [node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    write(folder, model(graph(nodes, [vi("x"), _COND], [vi("y")])))


@case("duplicate_input_names", "the graph lists input x twice")
def _dup_inputs(folder: Path) -> None:
    write(folder, model(graph([node("Relu", ["x"], ["y"])], [vi("x"), vi("x")], [vi("y")])))


@case("duplicate_node_names", "two nodes share one name", None)
def _dup_node_names(folder: Path) -> None:
    nodes = [node("Relu", ["x"], ["a"], name="same"), node("Neg", ["a"], ["y"], name="same")]
    write(folder, model(graph(nodes, [vi("x")], [vi("y")])))


@case("dangling_input", "a node reads a tensor nothing produces")
def _dangling(folder: Path) -> None:
    write(folder, model(graph([node("Add", ["x", "ghost"], ["y"])], [vi("x")], [vi("y")])))


# --- degenerate graphs ------------------------------------------------------------------------------
@case("empty_graph", "a graph with no nodes, inputs or outputs", read_exit=None)
def _empty(folder: Path) -> None:
    write(folder, model(graph([], [], [])))


@case("no_outputs", "a graph with a node but no outputs", read_exit=None)
def _no_outputs(folder: Path) -> None:
    write(folder, model(graph([node("Relu", ["x"], ["y"])], [vi("x")], [])))


@case("output_is_input", "the graph output is the graph input, no nodes", None)
def _output_is_input(folder: Path) -> None:
    write(folder, model(graph([], [vi("x")], [vi("x")])))


@case("output_is_initializer", "the only output is an initializer, no inputs", None)
def _output_is_init(folder: Path) -> None:
    write(folder, model(graph([], [], [vi("w")], [init("w", np.arange(4))])))


@case("model_without_graph", "a ModelProto with opsets but no graph")
def _no_graph(folder: Path) -> None:
    m = relu_model()
    m.ClearField("graph")
    write(folder, m)


def _nested_if(depth: int) -> bytes:
    """A model whose If nodes are nested ``depth`` deep, serialized by hand (protobuf's own serializer refuses
    to nest that deep): level i is ``t{i} = If(c, then=<level i+1>, else=Identity(x))``."""
    inner = _graph_bytes([node("Identity", ["x"], [f"t{depth}"]).SerializeToString()], f"t{depth}")
    for level in reversed(range(depth)):
        inner = _graph_bytes([_if_bytes(inner, f"e{level}", f"t{level}")], f"t{level}")
    top = model(graph([], [vi("x"), _COND], [vi("y")]))
    top_graph = _if_bytes(inner, "e_top", "y", cond_name="top")
    body = _len_field(1, top_graph) + top.graph.SerializeToString()
    top.ClearField("graph")
    return top.SerializeToString() + _len_field(7, body)


def _graph_bytes(nodes: list[bytes], output: str) -> bytes:
    shell = graph([], [], [vi(output)], name=f"g_{output}")
    return b"".join(_len_field(1, n) for n in nodes) + shell.SerializeToString()


def _if_bytes(then_g: bytes, else_out: str, out: str, cond_name: str = "") -> bytes:
    """NodeProto bytes: ``out = If(c)`` with ``then_g`` as then-branch and ``Identity(x)`` as else-branch."""
    else_g = _graph_bytes([node("Identity", ["x"], [else_out]).SerializeToString()], else_out)
    attrs = b"".join(
        _len_field(5, _len_field(1, name.encode()) + _len_field(6, body) + b"\xa0\x01\x05")  # type: GRAPH
        for name, body in (("then_branch", then_g), ("else_branch", else_g)))
    name = (cond_name or f"if_{out}").encode()
    return _len_field(1, b"c") + _len_field(2, out.encode()) + _len_field(3, name) + _len_field(4, b"If") + attrs


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


@case("nested_if_1000", "If nodes nested 1000 deep (past protobuf's recursion limit)", tags=["bomb"])
def _deep_if(folder: Path) -> None:
    write(folder, _nested_if(1000))


@case("nested_if_30", "If nodes nested 30 deep (within protobuf's recursion limit)", None, tags=["bomb"])
def _deep_if_30(folder: Path) -> None:
    write(folder, _nested_if(30))


# --- versions, domains, functions -------------------------------------------------------------------
@case("future_ir_version", "IR version 99", read_exit=None)
def _future_ir(folder: Path) -> None:
    m = relu_model()
    m.ir_version = 99
    write(folder, m)


@case("future_opset", "default-domain opset 99", read_exit=None)
def _future_opset(folder: Path) -> None:
    write(folder, model(graph([node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")]), opset=99))


@case("unknown_domain_op", "an op of the unknown domain com.evil (no schema, no kernel)", read_exit=None)
def _unknown_domain(folder: Path) -> None:
    g = graph([node("Boom", ["x"], ["y"], domain="com.evil")], [vi("x")], [vi("y")])
    write(folder, model(g, extra_opsets={"com.evil": 1}))


@case("unknown_default_op", "an op NoSuchOp in the default domain", read_exit=None)
def _unknown_op(folder: Path) -> None:
    write(folder, model(graph([node("NoSuchOp", ["x"], ["y"])], [vi("x")], [vi("y")])))


def _function(name: str, calls: str) -> object:
    return helper.make_function("local", name, ["a"], ["b"], [node(calls, ["a"], ["b"], domain="local")],
                                [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


@case("recursive_function", "a local function that calls itself", read_exit=None, tags=["bomb"])
def _recursive(folder: Path) -> None:
    g = graph([node("F", ["x"], ["y"], domain="local")], [vi("x")], [vi("y")])
    write(folder, model(g, functions=[_function("F", "F")], extra_opsets={"local": 1}))  # type: ignore[list-item]


@case("mutually_recursive_functions", "local functions F and G calling each other", read_exit=None, tags=["bomb"])
def _mutual(folder: Path) -> None:
    g = graph([node("F", ["x"], ["y"], domain="local")], [vi("x")], [vi("y")])
    funcs = [_function("F", "G"), _function("G", "F")]
    write(folder, model(g, functions=funcs, extra_opsets={"local": 1}))  # type: ignore[arg-type]


@case("function_bomb", "f0 calls f1 twice, ... 30 levels: 2**30 nodes once the functions are expanded (onnx's "
      "shape inference and onnxruntime expand them for minutes in native code)", read_exit=None, tags=["bomb"])
def _function_bomb(folder: Path) -> None:
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    funcs = [helper.make_function("local", f"f{i}", ["a"], ["b"],
                                  [node(f"f{i + 1}", ["a"], ["m"], domain="local"),
                                   node(f"f{i + 1}", ["m"], ["b"], domain="local")], opsets) for i in range(30)]
    funcs.append(helper.make_function("local", "f30", ["a"], ["b"], [node("Relu", ["a"], ["b"])], opsets[:1]))
    g = graph([node("f0", ["x"], ["y"], domain="local")], [vi("x")], [vi("y")])
    write(folder, model(g, functions=funcs, extra_opsets={"local": 1}))  # type: ignore[arg-type]


# --- names that are not UTF-8 -----------------------------------------------------------------------
def _non_utf8(m: ModelProto, placeholder: str) -> bytes:
    data = m.SerializeToString()
    assert data.count(placeholder.encode()) >= 1
    return data.replace(placeholder.encode(), b"\xff\xfe\x80" + placeholder.encode()[3:])


@case("non_utf8_node_name", "a node name that is not valid UTF-8")
def _utf8_node(folder: Path) -> None:
    m = model(graph([node("Relu", ["x"], ["y"], name="NODENAME")], [vi("x")], [vi("y")]))
    write(folder, _non_utf8(m, "NODENAME"))


@case("non_utf8_tensor_name", "an intermediate tensor name that is not valid UTF-8")
def _utf8_tensor(folder: Path) -> None:
    nodes = [node("Relu", ["x"], ["TENSORNM"], name="r"), node("Neg", ["TENSORNM"], ["y"], name="n")]
    write(folder, _non_utf8(model(graph(nodes, [vi("x")], [vi("y")])), "TENSORNM"))


@case("non_utf8_input_name", "a graph input name that is not valid UTF-8")
def _utf8_input(folder: Path) -> None:
    m = model(graph([node("Relu", ["INPUTNAM"], ["y"], name="r")], [vi("INPUTNAM")], [vi("y")]))
    write(folder, _non_utf8(m, "INPUTNAM"))


@case("non_utf8_initializer_name", "an initializer name that is not valid UTF-8")
def _utf8_init(folder: Path) -> None:
    m = model(graph([node("Add", ["x", "WEIGHTNM"], ["y"], name="a")], [vi("x")], [vi("y")],
                    [init("WEIGHTNM", np.ones(4))]))
    write(folder, _non_utf8(m, "WEIGHTNM"))


@case("non_utf8_op_type", "an op_type that is not valid UTF-8")
def _utf8_op(folder: Path) -> None:
    write(folder, _non_utf8(model(graph([node("OPTYPEXX", ["x"], ["y"], name="r")], [vi("x")], [vi("y")])),
                            "OPTYPEXX"))
