"""Pattern passes: simplifications written as pattern files and run by the rewrite engine (here, above both
the simplifier and the engine, which do not import each other).

``fuse-conv-bn`` folds an inference BatchNormalization into the preceding Conv's weight and bias (what
onnxoptimizer's ``fuse_bn_into_conv`` does): it is the ``conv-bn`` pattern family of
``patterns/conv_bn/conv-bn.toml``, matched and replaced by the same engine as ``gsrewrite apply``;
``fold-conv-affine`` and ``fuse-matmul-add`` likewise. The pattern file is read on first use, the named
functions only once a graph has the ops of some template.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import onnx_graphsurgeon as gs

from gsrewrite.protocols import PassResult
from gsrewrite.simplifier.passes.base import SimplifyPass


class PatternPass(SimplifyPass):
    """Apply the patterns of one pattern file (standard ONNX target), with the named functions they use."""

    def __init__(self, name: str, description: str, pattern_file: str | os.PathLike,
                 functions: Callable[[], tuple[Mapping[str, Any], Mapping[str, Any]]]) -> None:
        self.name = name  # type: ignore[misc]
        self.description = description  # type: ignore[misc]
        self.pattern_file = pattern_file
        self._functions = functions
        self._rewrite: Any = None

    def run(self, graph: gs.Graph) -> PassResult:
        """The engine's result: the rewrites counted by pattern."""
        present = {(n.domain or "", n.op) for n in graph.nodes}
        if not any(set(p.required_ops) <= present for p in _patterns(str(self.pattern_file))):
            return PassResult(graph)  # some op of every template is missing: nothing can match
        result: PassResult = self._engine().run(graph)
        return result

    def _engine(self) -> Any:
        if self._rewrite is None:
            from gsrewrite.engine.rewrite import RewritePass

            checks, computes = self._functions()
            self._rewrite = RewritePass(_patterns(str(self.pattern_file)), dict(checks), dict(computes), "onnx")
        return self._rewrite


@functools.lru_cache(maxsize=32)
def _patterns(path: str) -> list[Any]:
    """The patterns of one file, parsed once per process (pattern files are data, never executed)."""
    from gsrewrite.patterns.pattern import load_pattern

    return load_pattern(path)
