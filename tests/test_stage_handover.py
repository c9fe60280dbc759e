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
    monkeypatch.setattr(optimize_module, "_simplified", lambda request: (
        *(done := simplified(request))[:2], None, *done[3:]))  # the graph left out
    reimported = gsrewrite.optimize(str(EXAMPLE))
    assert len(imports) == 1  # without the graph, the simplified model is imported again
    assert handed.model.SerializeToString() == reimported.model.SerializeToString()
    assert dict(handed.counts) == dict(reimported.counts)


@pytest.mark.parametrize("limit", [0, 1 << 40])
def test_the_reference_run_overlaps_the_rewrite_only_for_small_models(monkeypatch: pytest.MonkeyPatch,
                                                                       limit: int) -> None:
    """Up to OVERLAP_MAX_WEIGHT_BYTES the reference run starts beside the cleanup; above, at the first comparison,
    after the fusion pass (its onnxruntime session never coexists with the rewrite's working set)."""
    from gsrewrite.pipelines import request
    from gsrewrite.validation.background import LazyValidator

    apply_module = importlib.import_module("gsrewrite.pipelines.apply")
    monkeypatch.setattr(request, "OVERLAP_MAX_WEIGHT_BYTES", limit)
    events: list[str] = []
    start, rewrite = LazyValidator.start, apply_module._rewrite

    def started(self: LazyValidator) -> LazyValidator:
        if not self.started:
            events.append("reference run")
        return start(self)

    def rewritten(*args: object, **kwargs: object) -> object:
        events.append("rewrite")
        return rewrite(*args, **kwargs)

    monkeypatch.setattr(LazyValidator, "start", started)
    monkeypatch.setattr(apply_module, "_rewrite", rewritten)
    result = gsrewrite.optimize(str(EXAMPLE))
    assert result.validation is not None and result.validation.ok
    assert events[:2] == (["rewrite", "reference run"] if limit == 0 else ["reference run", "rewrite"])
