"""The request as one object (issue 35 item 1): each entry makes one :class:`~gsrewrite.request.Request`
(pipelines/request.py), with one model handle (model_io/source.Source); its scratch file ends with the call however
the call ends, what the caller bound (a staged save) is kept, the stage lines measure against its weight bytes, and
nothing of it outlives the call."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gsrewrite
from gsrewrite.model_io.scratch import is_scratch, spill
from gsrewrite.model_io.source import Source
from gsrewrite.model_io.weights import tensor_values
from gsrewrite.request import Request, bound, current

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bert-tiny.onnx"


def _linear(path: Path) -> None:
    """Reshape -> Gemm(transB = 1) -> Reshape over a 2 MB weight: linear-3d-transposed makes W^T (a payload the
    request's scratch file holds) and fp16 halves it."""
    rng = np.random.default_rng(1)
    weight = (rng.standard_normal((1024, 512)) / 20).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.zeros(1024, np.float32), "c"),
             numpy_helper.from_array(np.array([-1, 512], np.int64), "s1"),
             numpy_helper.from_array(np.array([2, 4, 1024], np.int64), "s2")]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["x2"]),
             helper.make_node("Gemm", ["x2", "w", "c"], ["y2"], transB=1),
             helper.make_node("Reshape", ["y2", "s2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 1024])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[Request]:
    """The requests the entries make from now on (each entry's, as it binds it)."""
    from gsrewrite.pipelines import request as request_module

    made: list[Request] = []
    real = request_module.bound

    @contextlib.contextmanager
    def recording(**changes: Any) -> Any:
        with real(**changes) as request:
            made.append(request)
            yield request

    monkeypatch.setattr(request_module, "bound", recording)
    return made


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temp folder the scratch files go to (empty: what is left there after a call is a leak)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _spilled_in(folder: Path) -> bool:
    """Whether a scratch file exists: unlinked at once on Linux (its descriptor open), named elsewhere."""
    scratch = current().scratch
    return scratch is not None and scratch.path is not None and (
        scratch.path.startswith("/proc/self/fd/") or bool(os.listdir(folder)))


@pytest.mark.parametrize("fails", [False, True])
def test_the_scratch_file_ends_with_the_call(tmp_path: Path, temp: Path, fails: bool) -> None:
    from gsrewrite.pipelines.request import entered

    _linear(tmp_path / "m.onnx")
    with pytest.raises(RuntimeError) if fails else contextlib.nullcontext(), \
            entered(Source.mapped(tmp_path / "m.onnx"), {}) as request:
        assert current() is request and request.weights_dir == str(tmp_path) and request.options == {}
        tensor = spill("made", np.ones((600, 500), np.float32))
        assert tensor is not None and is_scratch(tensor) and _spilled_in(temp)
        scratch = request.scratch
        if fails:
            raise RuntimeError("a step failed")
    assert current() == Request()  # nothing of the request outlives the call
    assert os.listdir(temp) == []  # a named scratch file (no /proc) is removed
    assert scratch.path is None and scratch.file._fd is None  # closed: an unlinked one (Linux) is gone then


def test_a_nested_call_shares_the_outer_scratch_file_and_leaves_it_open(tmp_path: Path, temp: Path) -> None:
    """optimize --compress: compress's request inside optimize's keeps optimize's scratch file (its payloads are
    still referred to) and does not close it."""
    from gsrewrite.pipelines.request import entered

    _linear(tmp_path / "m.onnx")
    with entered(Source.mapped(tmp_path / "m.onnx")) as outer:
        tensor = spill("made", np.ones((600, 500), np.float32))
        assert tensor is not None
        with entered(outer.source.derived(outer.source.model)) as inner:
            assert inner.scratch is outer.scratch and inner.weights_dir == outer.weights_dir
            assert inner is not outer and inner.source is not outer.source
        assert is_scratch(tensor)  # still readable: the inner call did not close the file
        np.testing.assert_array_equal(tensor_values(tensor), np.ones((600, 500), np.float32))
    assert os.listdir(temp) == []


def test_what_the_caller_bound_is_kept_and_the_stage_lines_measure_the_models_weights(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI opens its StagedSave before the call: the request the entry makes keeps it as its report sink; its
    stage timer's unit is the model's weight bytes (the -v lines' ratio)."""
    from gsrewrite.model_io.staging import StagedSave

    made = _recorded(monkeypatch)
    with caplog.at_level(logging.INFO, logger="gsrewrite.stages"), StagedSave(tmp_path / "out.onnx") as output:
        result = gsrewrite.optimize(str(EXAMPLE))
        output.save(result.model, result.serialized, result.weights_dir)
    assert len(made) == 1 and made[0].output is output
    weights = Source.of(str(EXAMPLE)).weight_bytes()
    assert made[0].weight_bytes == weights
    lines = [r.getMessage() for r in caplog.records if "peak RSS" in r.getMessage()]
    assert lines and all("x weights)" in line for line in lines)  # every stage measured against the request's
    assert current() == Request()
    assert result.seconds > 0 and result.to_dict()["seconds"] == round(result.seconds, 4)


def test_one_model_handle_class_for_every_entry_and_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """optimize, apply, simplify and compress read their model into the same handle class validation runs."""
    from gsrewrite.pipelines import options
    from gsrewrite.validation.runner import resolve_model

    assert options.Source is Source
    made = _recorded(monkeypatch)
    _linear(tmp_path / "m.onnx")
    mapped = Source.mapped(tmp_path / "m.onnx")
    gsrewrite.optimize(mapped)
    gsrewrite.apply(mapped, ["linear-3d"])
    gsrewrite.simplify(str(tmp_path / "m.onnx"))
    gsrewrite.compress(mapped, "fp16")
    assert len(made) == 4 and all(type(request.source) is Source for request in made)
    assert [request.options is not None for request in made] == [True, True, True, False]  # compress: its own way
    assert [request.weights_dir for request in made] == [str(tmp_path), str(tmp_path), None, str(tmp_path)]
    assert type(resolve_model(str(tmp_path / "m.onnx"), "candidate")) is Source
    assert resolve_model(mapped, "original") is mapped


def test_a_handle_made_inside_a_request_finds_its_weights_folder(tmp_path: Path) -> None:
    """A model that refers to weights in files, made inside a request without a file of its own (a candidate, a
    fused model handed to compress), is read from the request's folder."""
    _linear(tmp_path / "m.onnx")
    mapped = Source.mapped(tmp_path / "m.onnx")
    assert mapped.weights_dir == str(tmp_path)
    assert Source(mapped.model).weights_dir is None  # outside a request: nowhere to read from
    with bound(weights_dir=str(tmp_path)):
        assert Source(mapped.model, role="candidate").weights_dir == str(tmp_path)
        assert Source(onnx.ModelProto()).weights_dir is None  # no references: no folder
    reference = mapped.reference()
    assert isinstance(reference, Source) and reference.path is None and reference.weights_dir == str(tmp_path)
    assert reference.role == "original" and reference.what == "the original model"


def test_a_constant_node_starts_the_reference_run_before_the_cleanup() -> None:
    """Why the graph importer needs no on_change: the only change it makes (a top-level Constant node turned into
    an initializer) is work likely_to_change() sees, so the reference run of a small model was started before."""
    from gsrewrite.pipelines.simplify import likely_to_change

    node = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones(3, np.float32)))
    add = helper.make_node("Add", ["x", "c"], ["y"])
    graph = helper.make_graph([node, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    assert likely_to_change(helper.make_model(graph))
