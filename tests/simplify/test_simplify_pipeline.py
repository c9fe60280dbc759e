"""The simplify pipeline: library API, pass selection, plugin passes, fixed point, bisection, metadata."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import onnx
import onnx_graphsurgeon as gs
import pytest
from ort_sessions import count_sessions

import gsrewrite
from gsrewrite.errors import UsageError
from gsrewrite.pipelines import SimplifyLimits, simplify
from gsrewrite.simplifier import PassRegistry, default_pass_registry
from gsrewrite.testing import model_from_text, op_counts

TEXT = """
g (float[2, 3] x) => (float[2, 3] y) {
    a = Identity (x)
    b = Relu (a)
    y = Neg (b)
}"""


@dataclass
class Outcome:
    graph: gs.Graph
    modified: bool


class ReluToSigmoid:
    """A broken third-party pass: it changes what the model computes."""

    name = "relu-to-sigmoid"
    description = "wrong on purpose"

    def run(self, graph: gs.Graph) -> Outcome:
        relus = [n for n in graph.nodes if n.op == "Relu"]
        for node in relus:
            node.op = "Sigmoid"
        return Outcome(graph, bool(relus))


class InvalidAttribute:
    """A broken third-party pass whose result onnxruntime refuses to load."""

    name = "invalid-attribute"
    description = "writes an attribute Relu does not have"

    def run(self, graph: gs.Graph) -> Outcome:
        relus = [n for n in graph.nodes if n.op == "Relu" and "bogus" not in n.attrs]
        for node in relus:
            node.attrs["bogus"] = 1
        return Outcome(graph, bool(relus))


class AlwaysModified:
    name = "always-modified"
    description = "claims a change every time"

    def run(self, graph: gs.Graph) -> Outcome:
        return Outcome(graph, True)


def registry_with(*extra: object) -> PassRegistry:
    registry = default_pass_registry()
    for pass_ in extra:
        registry.add(pass_)
    return registry


def test_library_api_accepts_a_path(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model_from_text(TEXT), path)
    result = gsrewrite.simplify(str(path))
    assert op_counts(result.model) == {"Relu": 1, "Neg": 1}
    assert result.changed and result.validation.ok
    assert result.to_dict()["after"]["nodes"] == 2


def test_the_validated_bytes_are_the_result_and_are_what_gets_saved(tmp_path):
    result = simplify(model_from_text(TEXT), registry=registry_with(ReluToSigmoid()))
    assert result.validation.ok and result.serialized is not None
    assert onnx.load_from_string(result.serialized) == result.model  # the last candidate, not a dropped one
    out = tmp_path / "out.onnx"
    assert gsrewrite.save_model(result.model, out, serialized=result.serialized) == len(result.serialized)
    assert out.read_bytes() == result.serialized
    assert simplify(model_from_text(TEXT), validate=False).serialized is None


def test_a_pass_that_breaks_the_model_is_dropped(caplog):
    with caplog.at_level(logging.WARNING, logger="gsrewrite"):
        result = simplify(model_from_text(TEXT), registry=registry_with(ReluToSigmoid()))
    assert list(result.dropped) == ["relu-to-sigmoid"]
    assert result.validation.ok
    assert op_counts(result.model) == {"Relu": 1, "Neg": 1}  # the other passes' work is kept
    assert "relu-to-sigmoid" in caplog.text


def test_a_pass_whose_result_does_not_load_is_dropped():
    result = simplify(model_from_text(TEXT), registry=registry_with(InvalidAttribute()))
    assert list(result.dropped) == ["invalid-attribute"]
    assert "onnxruntime cannot load" in result.dropped["invalid-attribute"]
    assert result.validation.ok and op_counts(result.model) == {"Relu": 1, "Neg": 1}


def test_plugin_pass_without_counts_is_counted_once():
    result = simplify(model_from_text(TEXT), only=["relu-to-sigmoid"], registry=registry_with(ReluToSigmoid()),
                      validate=False)
    assert result.counts == {"relu-to-sigmoid": 1}


def test_fixed_point_is_bounded(caplog):
    with caplog.at_level(logging.WARNING, logger="gsrewrite"):
        result = simplify(model_from_text(TEXT), only=["always-modified"], limits=SimplifyLimits(max_rounds=3),
                          registry=registry_with(AlwaysModified()), validate=False)
    assert result.rounds == 3
    assert "fixed point" in caplog.text


def test_selection_errors_name_the_known_passes():
    with pytest.raises(UsageError, match=r"unknown pass 'nope'.*fold-constants"):
        simplify(model_from_text(TEXT), skip=["nope"])
    with pytest.raises(UsageError, match="not a graph pass"):
        PassRegistry().add(object(), name="x")


def test_nothing_to_do_loads_the_original_but_runs_nothing(monkeypatch):
    """An unchanged model is not compared, but onnxruntime must be able to load it (else: cannot validate)."""
    sessions = count_sessions(monkeypatch)
    model = model_from_text("""
    g (float[2, 3] x) => (float[2, 3] y) {
        y = Relu (x)
    }""")
    result = simplify(model)
    assert len(sessions.created) == 1 and not sessions.ran
    assert not result.changed and result.validation is None and not result.counts
    assert result.after.size <= result.before.size


def test_the_reference_run_starts_with_the_first_change(monkeypatch):
    """A model without the usual cleanup work starts its reference run only when a pass changes something."""
    from gsrewrite.pipelines import bisect
    from gsrewrite.simplifier import driver

    events = []
    start, run_once = bisect.Checker.start, driver._run_once
    monkeypatch.setattr(bisect.Checker, "start", lambda self: events.append("start") or start(self))

    def logged(graph, pass_, *rest):
        outcome = run_once(graph, pass_, *rest)
        events.append(f"{pass_.name}:{outcome[1]}")
        return outcome

    monkeypatch.setattr(driver, "_run_once", logged)
    text = """
    g (float[2, 3] x) => (float[2, 3] y) {
        a = Relu (x)
        b = Relu (x)
        y = Add (a, b)
    }"""
    result = simplify(model_from_text(text), only=["eliminate-noops", "eliminate-common-subexpressions"])
    assert result.changed and result.validation.ok
    assert events[:3] == ["eliminate-noops:0", "eliminate-common-subexpressions:1", "start"]
    events.clear()
    with_identity = text.replace("a = Relu (x)", "i = Identity (x)  a = Relu (i)")
    simplify(model_from_text(with_identity), only=["eliminate-noops", "eliminate-common-subexpressions"])
    assert events[0] == "start"  # usual cleanup work ahead: started before the passes


def test_debug_metadata_is_dropped_unless_kept():
    model = model_from_text(TEXT)
    model.graph.node[1].name = "relu"
    model.graph.node[1].metadata_props.add(key="pkg.torch.onnx.stack_trace", value="File x.py, line 1")
    model.metadata_props.add(key="author", value="me")
    dropped = simplify(model, validate=False).model
    kept = simplify(model, validate=False, keep_metadata=True).model
    assert not any(n.metadata_props for n in dropped.graph.node)
    assert [p.key for n in kept.graph.node for p in n.metadata_props] == ["pkg.torch.onnx.stack_trace"]
    assert [(p.key, p.value) for p in dropped.metadata_props] == [("author", "me")]


def test_a_model_onnxruntime_cannot_run_asks_for_no_validate():
    from onnx import TensorProto, helper

    from gsrewrite.errors import ValidationError

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Unknown", ["a"], ["y"], domain="my.domain")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])
    with pytest.raises(ValidationError, match="--no-validate"):
        simplify(model)
    assert op_counts(simplify(model, validate=False).model) == {"my.domain.Unknown": 1}


def test_a_bad_pass_name_starts_no_reference_run(monkeypatch):
    """The selection is checked before validation starts: a failed call leaves no onnxruntime work behind (a
    reference run once outlived it and created a session during the next test)."""
    import threading
    import time

    sessions = count_sessions(monkeypatch)
    before = threading.active_count()
    with pytest.raises(UsageError):
        simplify(model_from_text(TEXT), skip=["nope"])
    time.sleep(0.2)
    assert not sessions.created and threading.active_count() <= before
