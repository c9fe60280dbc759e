"""engine.graph.toposort (producers first, the given order kept where it is one) and cleanup (dead nodes out)."""

from __future__ import annotations

import random

import numpy as np
import onnx_graphsurgeon as gs
import pytest

from gsrewrite.graph.core import cleanup, is_sorted, toposort


def _chain_graph(length: int) -> gs.Graph:
    x = gs.Variable("x", np.float32, [2])
    nodes, current = [], x
    for i in range(length):
        out = gs.Variable(f"t{i}", np.float32, [2])
        side = gs.Variable(f"s{i}", np.float32, [2])  # a second consumer of every link
        nodes += [gs.Node("Relu", inputs=[current], outputs=[out]), gs.Node("Neg", inputs=[current], outputs=[side])]
        current = out
    return gs.Graph(nodes=nodes, inputs=[x], outputs=[current], opset=17)


def test_shuffled_graphs_are_sorted_and_keep_every_node():
    graph = _chain_graph(300)  # deeper than the recursion a naive DFS could afford
    original = list(graph.nodes)
    for seed in range(3):
        shuffled = original[:]
        random.Random(seed).shuffle(shuffled)
        graph.nodes = shuffled
        toposort(graph)
        assert is_sorted(graph) and {id(n) for n in graph.nodes} == {id(n) for n in original}


def test_a_sorted_order_is_kept_and_only_misplaced_nodes_move():
    graph = _chain_graph(5)
    original = list(graph.nodes)
    toposort(graph)
    assert all(a is b for a, b in zip(graph.nodes, original, strict=True))
    graph.nodes = [original[2], *original[:2], *original[3:]]  # Relu of t0 moved ahead of its producer
    toposort(graph)  # its producer is pulled in just ahead of it; the rest keeps its order
    expected = [original[0], original[2], original[1], *original[3:]]
    assert all(a is b for a, b in zip(graph.nodes, expected, strict=True))


def test_a_cycle_is_left_to_onnx_graphsurgeon():
    a, b = gs.Variable("a", np.float32, [1]), gs.Variable("b", np.float32, [1])
    graph = gs.Graph(nodes=[gs.Node("Relu", inputs=[a], outputs=[b]), gs.Node("Relu", inputs=[b], outputs=[a])],
                     opset=17)
    with pytest.raises(Exception, match=r"(?i)cycle"):
        toposort(graph)


def test_cleanup_drops_and_disconnects_what_no_output_needs_like_onnx_graphsurgeon():
    ours, theirs = _chain_graph(6), _chain_graph(6)
    for graph in (ours, theirs):
        graph.outputs = [graph.nodes[4].outputs[0]]  # t2: the links after it and every side Neg are dead
    cleanup(ours)
    theirs.cleanup(remove_unused_graph_inputs=False)
    assert [n.name for n in ours.nodes] == [n.name for n in theirs.nodes] and len(ours.nodes) == 3
    assert gs.export_onnx(ours, do_type_check=False) == gs.export_onnx(theirs, do_type_check=False)
    dead_input = ours.inputs[0]
    assert all(id(n) in {id(k) for k in ours.nodes} for n in dead_input.outputs)  # dead readers disconnected


def test_to_model_keeps_everything_but_the_graph_from_the_original():
    import onnx
    from onnx import helper

    from gsrewrite.graph.core import import_onnx, to_model

    function = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                    [helper.make_opsetid("", 17)])
    original = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "main",
                          [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])],
                          doc_string="graph doc"),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], functions=[function],
        producer_name="exporter", producer_version="1.2", doc_string="model doc", model_version=7)
    helper.set_model_props(original, {"author": "me"})
    graph = import_onnx(original)
    graph.nodes.append(gs.Node("Neg", inputs=[graph.outputs[0]], outputs=[gs.Variable("z", np.float32, [2])]))
    graph.outputs.append(graph.nodes[-1].outputs[0])
    model = to_model(graph, original)
    assert [n.op_type for n in model.graph.node] == ["Relu", "Neg"] and model.graph.name == "main"
    assert (model.producer_name, model.producer_version, model.doc_string, model.model_version) == \
        ("exporter", "1.2", "model doc", 7)
    assert model.graph.doc_string == "graph doc" and [p.key for p in model.metadata_props] == ["author"]
    assert [f.name for f in model.functions] == ["F"] and model.ir_version == original.ir_version
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 17), ("local", 1)}
    onnx.checker.check_model(model)


def test_constant_values_leave_file_backed_weights_lazy():
    from onnx import numpy_helper
    from onnx_graphsurgeon.ir.tensor import LazyValues

    from gsrewrite.graph.core import constant_values

    proto = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    weight = gs.Constant("w", LazyValues(proto))
    first = constant_values(weight)
    assert first.tolist() == [[0, 1, 2], [3, 4, 5]] and isinstance(weight._values, LazyValues)
    assert constant_values(weight) is first  # loaded once
    graph = gs.Graph(nodes=[gs.Node("Relu", inputs=[weight], outputs=[gs.Variable("y", np.float32, [2, 3])])],
                     outputs=[], opset=17)
    graph.outputs = [graph.nodes[0].outputs[0]]
    exported = gs.export_onnx(graph)
    assert exported.graph.initializer[0] == proto  # the original TensorProto, not a converted array
    assert constant_values(gs.Constant("c", np.ones(2, np.float32))).tolist() == [1.0, 1.0]
