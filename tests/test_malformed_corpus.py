"""Every malformed model fails cleanly: a typed error in the library, one line and exit 2 in the CLI.

Commands are grouped by what they do with the model: READING_COMMANDS only read it; WRITING_COMMANDS read
``MODEL`` and write ``-o OUT``, and must leave no output file behind when the input is bad. Add a command
name to WRITING_COMMANDS when it lands (``apply``, ``simplify``); the tests pick it up.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from malformed import CASE_NAMES, MalformedCase, build_corpus, len_field

from gsrewrite.cli import main
from gsrewrite.errors import NotAnOnnxModelError
from gsrewrite.model_io import load_model

#: Commands that only read the model: name -> argument list for a given model path.
READING_COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "info": lambda model: ["info", model],
    "validate": lambda model: ["validate", model, model],
}
#: Commands invoked as ``COMMAND MODEL -o OUT`` that must not leave OUT behind on failure.
WRITING_COMMANDS: list[str] = ["apply"]

COMMANDS = [(name, False) for name in READING_COMMANDS] + [(name, True) for name in WRITING_COMMANDS]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, MalformedCase]:
    return {case.name: case for case in build_corpus(tmp_path_factory.mktemp("malformed"))}


def _snapshot(path: Path) -> bytes | list[str] | None:
    """File bytes, a directory's listing, or None for a missing path."""
    if path.is_dir():
        return sorted(p.name for p in path.iterdir())
    return path.read_bytes() if path.exists() else None


def test_corpus_is_large_and_consistent(corpus: dict[str, MalformedCase]) -> None:
    assert len(corpus) >= 15
    assert list(corpus) == CASE_NAMES
    assert all(case.reason and "\n" not in case.reason for case in corpus.values())


@pytest.mark.parametrize("name", CASE_NAMES)
def test_load_model_raises_typed_error(corpus: dict[str, MalformedCase], name: str) -> None:
    case = corpus[name]
    before = _snapshot(case.path)
    with pytest.raises(case.error) as info:
        load_model(case.path)
    assert type(info.value) is case.error
    message = str(info.value)
    assert "\n" not in message
    assert "model.onnx" in message  # names the file
    assert _snapshot(case.path) == before


@pytest.mark.parametrize("name", CASE_NAMES)
def test_load_without_external_data_raises_same_error(corpus: dict[str, MalformedCase], name: str) -> None:
    with pytest.raises(corpus[name].error):
        load_model(corpus[name].path, load_external_data=False)


@pytest.mark.parametrize(("command", "writes"), COMMANDS)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_cli_fails_with_one_line(
    corpus: dict[str, MalformedCase], name: str, command: str, writes: bool, tmp_path: Path
) -> None:
    case = corpus[name]
    before = _snapshot(case.path)
    out = tmp_path / "out.onnx"
    args = [command, str(case.path), "-o", str(out)] if writes else READING_COMMANDS[command](str(case.path))
    result = CliRunner().invoke(main, args)
    if result.exit_code == 2 and "No such command" in result.output:
        pytest.skip(f"the '{command}' command is not available yet")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    assert _snapshot(case.path) == before
    if writes:
        assert not out.exists()
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", CASE_NAMES)
def test_load_model_raises_the_same_error_with_payload_lengths_from_the_bytes(
        corpus: dict[str, MalformedCase], name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large models have their initializers' raw_data lengths read from the serialized bytes (no copy of each
    payload); every malformed case is refused the same way on that path."""
    from gsrewrite.model_io import loading

    monkeypatch.setattr(loading, "PAYLOAD_SCAN_BYTES", 0)
    case = corpus[name]
    with pytest.raises(case.error) as info:
        load_model(case.path)
    assert type(info.value) is case.error and "model.onnx" in str(info.value)


@pytest.mark.parametrize("last_is_right", [True, False])
def test_payload_lengths_from_the_bytes_follow_protobuf_when_raw_data_repeats(
        tmp_path: Path, last_is_right: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor whose raw_data field appears twice holds the last one when parsed: the length read from the
    bytes is the last one's too, so a model is accepted or refused exactly as its parsed tensors say."""
    import onnx
    from onnx import TensorProto, helper

    from gsrewrite.errors import InvalidModelError
    from gsrewrite.model_io import loading

    monkeypatch.setattr(loading, "PAYLOAD_SCAN_BYTES", 0)
    good, bad = bytes(16), bytes(8)  # FLOAT[4] needs 16
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    extra = TensorProto(raw_data=good if last_is_right else bad).SerializeToString()  # one more raw_data field
    tensor.raw_data = bad if last_is_right else good
    merged = TensorProto()
    merged.ParseFromString(tensor.SerializeToString() + extra)
    assert len(merged.raw_data) == (16 if last_is_right else 8)
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(helper.make_graph([], "empty", [], []), opset_imports=[helper.make_opsetid("", 17)])
    model.ClearField("graph")
    # the graph's initializer (field 5) and the model's graph (field 7) written by hand: fields may come in
    # any order, so the graph is its other fields, then the tensor with two raw_data fields
    graph_bytes = graph.SerializeToString() + len_field(5, tensor.SerializeToString() + extra)
    data = model.SerializeToString() + len_field(7, graph_bytes)
    parsed = onnx.ModelProto()
    parsed.ParseFromString(data)
    assert len(parsed.graph.initializer[0].raw_data) == (16 if last_is_right else 8)
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    if last_is_right:
        assert load_model(path).graph.initializer[0].raw_data == good
    else:
        with pytest.raises(InvalidModelError):
            load_model(path)


def test_load_model_parses_from_a_mapping_it_closes(tmp_path: Path) -> None:
    """The file is parsed from a read-only mapping: the model equals onnx's own load, holds its own bytes, and
    the file is no longer mapped once load_model returns (it can be replaced, and nothing dangles)."""
    import os

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    loaded = load_model(path)
    if os.path.exists("/proc/self/maps"):
        with open("/proc/self/maps") as maps:
            assert str(path) not in maps.read()
    path.write_bytes(b"\0" * path.stat().st_size)  # the file's bytes change under the loaded model
    assert loaded.graph.initializer[0].raw_data == weight.tobytes()
    assert (tmp_path / "empty.onnx").write_bytes(b"") == 0
    with pytest.raises(NotAnOnnxModelError):
        load_model(tmp_path / "empty.onnx")


def test_load_model_reads_a_file_it_cannot_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the file system cannot map the file (mmap raises), the model is read instead: same model."""
    import onnx
    from onnx import TensorProto, helper

    from gsrewrite.model_io import loading

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(19, "No such device")

    monkeypatch.setattr(loading.mmap, "mmap", refuse)
    assert load_model(path) == onnx.load(path)
