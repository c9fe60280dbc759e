"""optimize hands the cleanup passes' graph to the fusion pass as it is (issue 27: no export/import round trip
between stages): the fusion pass imports nothing, and the result is byte for byte what re-importing gave."""

from __future__ import annotations

import importlib
from pathlib import Path

import onnx
import pytest

import gsrewrite

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bert-tiny.onnx"


def test_the_fusion_pass_takes_the_cleanup_graph_and_gives_the_same_model(monkeypatch: pytest.MonkeyPatch) -> None:
    apply_module = importlib.import_module("gsrewrite.pipelines.apply")
    optimize_module = importlib.import_module("gsrewrite.pipelines.optimize")
    imports: list[int] = []
    to_graph = apply_module.to_graph

    def counted(model: onnx.ModelProto, **kwargs: object) -> object:
        imports.append(len(model.graph.node))
        return to_graph(model, **kwargs)

    monkeypatch.setattr(apply_module, "to_graph", counted)
    handed = gsrewrite.optimize(str(EXAMPLE))
    assert handed.passes and handed.counts  # the cleanup changed the model and fusions applied
    assert imports == []  # the fusion pass imported nothing: it took the cleanup's graph

    simplified = optimize_module._simplified
    monkeypatch.setattr(optimize_module, "_simplified", lambda model, on_change: (*simplified(model, on_change)[:2],
                                                                                 None))
    reimported = gsrewrite.optimize(str(EXAMPLE))
    assert len(imports) == 1  # without the graph, the simplified model is imported again
    assert handed.model.SerializeToString() == reimported.model.SerializeToString()
    assert dict(handed.counts) == dict(reimported.counts)
