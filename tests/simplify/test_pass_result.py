"""One pass result: the simplify passes, the pattern passes and the rewrite engine return the same PassResult
(the graph, whether it changed, the rewrites counted by pattern or pass)."""

from __future__ import annotations

import numpy as np

from gsrewrite.engine.rewrite import RewritePass
from gsrewrite.graph.conversion import to_graph
from gsrewrite.patterns.registry import PatternRegistry
from gsrewrite.protocols import PassResult
from gsrewrite.simplifier import default_pass_registry
from gsrewrite.testing import model_from_text

RNG = np.random.default_rng(5)
CONV_BN = model_from_text("""
g (float[1, 3, 8, 8] x) => (float[1, 4, 6, 6] y) {
    c = Conv <kernel_shape = [3, 3]> (x, w, b)
    i = Identity (c)
    y = BatchNormalization <epsilon = 0.001> (i, scale, shift, mean, var)
}""", initializers={"w": RNG.normal(size=(4, 3, 3, 3)).astype(np.float32),
                    "b": RNG.normal(size=4).astype(np.float32),
                    "scale": RNG.uniform(0.5, 2, 4).astype(np.float32), "shift": RNG.normal(size=4).astype(np.float32),
                    "mean": RNG.normal(size=4).astype(np.float32), "var": RNG.uniform(0.5, 2, 4).astype(np.float32)})


def _pass(name: str):
    return next(p for p in default_pass_registry().pipeline() if p.name == name)


def test_a_simplify_pass_counts_under_its_name():
    result = _pass("eliminate-noops").run(to_graph(CONV_BN))
    assert type(result) is PassResult
    assert result.modified and result.counts == {"eliminate-noops": 1} and result.changes == 1


def test_a_pattern_pass_counts_by_pattern_as_the_engine_does():
    graph = to_graph(CONV_BN)
    _pass("eliminate-noops").run(graph)
    result = _pass("fuse-conv-bn").run(graph)
    assert type(result) is PassResult
    assert result.modified and result.counts == {"conv-bn": 1} and result.changes == 1


def test_the_rewrite_engine_returns_the_same_type():
    registry = PatternRegistry()
    registry.add_package("gsrewrite_patterns")
    patterns = registry.select(["conv-bn"])
    graph = to_graph(CONV_BN)
    _pass("eliminate-noops").run(graph)
    result = RewritePass(patterns, registry.checks, registry.computes, "onnx").run(graph)
    assert type(result) is PassResult
    assert result.modified and result.counts == {"conv-bn": 1} and [r.pattern for r in result.records] == ["conv-bn"]


def test_nothing_to_do_is_an_unchanged_result():
    result = _pass("fuse-conv-bn").run(to_graph(model_from_text("""
    g (float[2] x) => (float[2] y) {
        y = Relu (x)
    }""")))
    assert type(result) is PassResult and not result.modified and result.changes == 0
