"""Output paths that can never destroy the user's files: an output (or its external-data file) is refused when it
is a file the input reads — the input model or any of its external-data files, however spelled (relative, in a
subfolder, through a symlink or a hard link) — or an existing file that is not the output's own data file.

Every refused case checks exit code 2 (OutputError), one line on stderr, every input byte unchanged and no new
file. Most CLI cases run the installed console script in a subprocess."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from gsrewrite.cli import main
from gsrewrite.errors import OutputError
from gsrewrite.model_io import check_output_path, load_model, save_model
from gsrewrite.model_io.external_data import data_files

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
WEIGHT = np.arange(1024, dtype=np.float32) / 7


def _model() -> onnx.ModelProto:
    """y = Identity(x) + w: simplify removes the Identity, so the command has something to write."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Add", ["t", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024])],
        [numpy_helper.from_array(WEIGHT, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _externalize(tensor: TensorProto, folder: Path, location: str) -> None:
    """Move the tensor's bytes to ``folder/location`` (appended) and point the tensor at them."""
    path = folder / location
    path.parent.mkdir(parents=True, exist_ok=True)
    offset = path.stat().st_size if path.exists() else 0
    with open(path, "ab") as f:
        f.write(tensor.raw_data)
    entries = {"location": location, "offset": str(offset), "length": str(len(tensor.raw_data))}
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)


def _input(folder: Path, location: str = "m.onnx.data", name: str = "m.onnx") -> Path:
    model = _model()
    _externalize(model.graph.initializer[0], folder, location)
    onnx.save(model, folder / name)
    return folder / name


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones included) with the hash of its bytes; links as their targets."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            found[str(path.relative_to(folder))] = "-> " + os.readlink(path)
        elif path.is_file():
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@dataclass
class Run:
    returncode: int
    stderr: str


def _cli(*args: str | Path, cwd: Path, installed: bool = False) -> Run:
    """The CLI run in ``cwd``: the installed console script in a subprocess, or click's runner in this process."""
    argv = [str(a) for a in args]
    if installed:
        done = subprocess.run([str(GSREWRITE), *argv], cwd=cwd, capture_output=True, text=True, timeout=120)
        return Run(done.returncode, done.stderr)
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, argv)
    finally:
        os.chdir(old)
    return Run(result.exit_code, result.stderr)


def _assert_refused(result: Run, before: dict[str, str], folder: Path, match: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], result.stderr
    assert _snapshot(folder) == before  # every input byte unchanged, no new file (temp files included)


def _runs(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.ones(1024, np.float32)})[0]


# --- the CLI, as installed ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("location", "output", "installed"), [
    ("m.onnx.data", "m.onnx.data", True),        # the adversary's case: output over the input's data file
    ("weights/w.bin", "weights/w.bin", False),   # a location in a subfolder
    ("weights/w.bin", "./weights/../weights/w.bin", False),
])
def test_output_over_the_inputs_data_file_is_refused(tmp_path: Path, location: str, output: str,
                                                     installed: bool) -> None:
    source = _input(tmp_path, location)
    before = _snapshot(tmp_path)
    result = _cli("simplify", source.name, "-o", output, cwd=tmp_path, installed=installed)
    _assert_refused(result, before, tmp_path, "the input model reads its external data from it")
    assert np.allclose(_runs(source), 1 + WEIGHT)


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_output_over_a_link_to_the_inputs_data_file_is_refused(tmp_path: Path, link: str) -> None:
    source = _input(tmp_path)
    alias = tmp_path / "alias.data"
    if link == "symlink":
        alias.symlink_to(tmp_path / "m.onnx.data")
    else:
        os.link(tmp_path / "m.onnx.data", alias)
    before = _snapshot(tmp_path)
    _assert_refused(_cli("simplify", source, "-o", alias, cwd=tmp_path), before, tmp_path,
                    "reads its external data from it")


@pytest.mark.parametrize("command", ["simplify", "optimize", "apply"])
def test_every_writing_command_refuses_the_input_and_its_data(tmp_path: Path, command: str) -> None:
    source = _input(tmp_path)
    before = _snapshot(tmp_path)
    _assert_refused(_cli(command, "m.onnx", "-o", "m.onnx", cwd=tmp_path), before, tmp_path,
                    "refusing to overwrite the input model")
    _assert_refused(_cli(command, "m.onnx", "-o", "m.onnx.data", "--in-place", cwd=tmp_path), before, tmp_path,
                    "reads its external data from it")  # --in-place is about the model file only
    assert np.allclose(_runs(source), 1 + WEIGHT)


def test_external_data_over_the_inputs_data_in_a_subfolder_is_refused(tmp_path: Path) -> None:
    # the adversary's second case: the input reads sub/out.onnx.data, the output's data file would be that file
    _input(tmp_path, "sub/out.onnx.data")
    before = _snapshot(tmp_path)
    result = _cli("simplify", "m.onnx", "--external-data", "-o", "sub/out.onnx", cwd=tmp_path, installed=True)
    _assert_refused(result, before, tmp_path, "which belongs to the input model")


def test_external_data_through_a_symlink_to_the_inputs_data_is_refused(tmp_path: Path) -> None:
    _input(tmp_path)
    (tmp_path / "out.onnx.data").symlink_to("m.onnx.data")
    before = _snapshot(tmp_path)
    result = _cli("simplify", "m.onnx", "--external-data", "-o", "out.onnx", cwd=tmp_path)
    _assert_refused(result, before, tmp_path, "which belongs to the input model")


def test_external_data_over_an_unrelated_file_is_refused(tmp_path: Path) -> None:
    _input(tmp_path)
    (tmp_path / "notes.onnx.data").write_text("not model data")
    other = _input(tmp_path / "other")  # a different model's own data file in another folder
    (tmp_path / "other" / "m.onnx").rename(tmp_path / "other" / "x.onnx")
    before = _snapshot(tmp_path)
    result = _cli("simplify", "m.onnx", "--external-data", "-o", "notes.onnx", cwd=tmp_path, installed=True)
    _assert_refused(result, before, tmp_path, "is not the data file of 'notes.onnx'")
    # x.onnx exists but reads m.onnx.data, not x.onnx.data: writing x.onnx + x.onnx.data is fine, while
    # writing m.onnx.data as the data of a new 'm.onnx' output there would replace x.onnx's weights
    assert other.parent.joinpath("x.onnx").exists()
    before = _snapshot(tmp_path)
    result = _cli("simplify", "m.onnx", "--external-data", "-o", "other/m.onnx", cwd=tmp_path)
    _assert_refused(result, before, tmp_path, "is not the data file of 'm.onnx'")


def test_the_outputs_own_data_file_is_replaced_with_it(tmp_path: Path) -> None:
    source = _input(tmp_path)
    for _ in range(2):  # the second run replaces out.onnx and the data file out.onnx refers to
        result = _cli("simplify", source, "--external-data", "--size-threshold", "0", "-o", "out.onnx", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert np.allclose(_runs(tmp_path / "out.onnx"), 1 + WEIGHT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "out.onnx", "out.onnx.data"]


def test_an_existing_unrelated_output_file_is_replaced_as_before(tmp_path: Path) -> None:
    # without external data the output may replace any file that the input does not read (unchanged behaviour)
    source = _input(tmp_path)
    (tmp_path / "out.onnx").write_text("an old result")
    inputs = {k: v for k, v in _snapshot(tmp_path).items() if k.startswith("m.onnx")}
    result = _cli("simplify", source, "-o", "out.onnx", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert np.allclose(_runs(tmp_path / "out.onnx"), 1 + WEIGHT)
    assert {k: v for k, v in _snapshot(tmp_path).items() if k.startswith("m.onnx")} == inputs


def test_in_place_with_external_data_replaces_the_model_and_its_own_data(tmp_path: Path) -> None:
    source = _input(tmp_path)
    result = _cli("simplify", source, "--in-place", "--external-data", "--size-threshold", "0", "-o", source,
                  cwd=tmp_path, installed=True)
    assert result.returncode == 0, result.stderr
    assert [n.op_type for n in onnx.load(source, load_external_data=False).graph.node] == ["Add"]
    assert np.allclose(_runs(source), 1 + WEIGHT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


def test_external_data_over_the_input_model_is_refused(tmp_path: Path) -> None:
    _input(tmp_path, name="o.onnx.data")  # an input model whose name is another output's data file name
    before = _snapshot(tmp_path)
    result = _cli("simplify", "o.onnx.data", "--external-data", "-o", "o.onnx", cwd=tmp_path)
    _assert_refused(result, before, tmp_path, "which is the input model")


# --- the library ----------------------------------------------------------------------------------------------
def _nested_model(folder: Path) -> Path:
    """A model whose external data is read only inside an If branch (c.bin) and a function body (f.bin)."""
    branch_value = numpy_helper.from_array(WEIGHT, "bw")
    _externalize(branch_value, folder, "c.bin")
    branch = helper.make_graph([helper.make_node("Constant", [], ["b"], value=branch_value)], "then", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1024])])
    fn_value = numpy_helper.from_array(WEIGHT, "fw")
    _externalize(fn_value, folder, "f.bin")
    function = helper.make_function("local", "AddW", ["a"], ["o"], [
        helper.make_node("Constant", [], ["k"], value=fn_value), helper.make_node("Add", ["a", "k"], ["o"])],
        [helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch),
         helper.make_node("AddW", ["y"], ["z"], domain="local")], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1024])])
    model = helper.make_model(graph, functions=[function], ir_version=8,
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    onnx.save(model, folder / "nested.onnx")
    return folder / "nested.onnx"


@pytest.mark.parametrize("data_file", ["c.bin", "f.bin"])
def test_data_read_in_subgraphs_and_functions_is_protected(tmp_path: Path, data_file: str) -> None:
    source = _nested_model(tmp_path)
    model = load_model(source)
    before = _snapshot(tmp_path)
    with pytest.raises(OutputError, match="reads its external data from it"):
        save_model(model, tmp_path / data_file, input_path=source)
    with pytest.raises(OutputError, match="belongs to the input model"):
        save_model(model, tmp_path / "out.onnx", input_path=source, external_data=True, location=data_file)
    assert _snapshot(tmp_path) == before


def test_a_hard_link_to_the_inputs_data_is_refused_as_a_data_location(tmp_path: Path) -> None:
    source = _input(tmp_path)
    os.link(tmp_path / "m.onnx.data", tmp_path / "copy.bin")
    before = _snapshot(tmp_path)
    with pytest.raises(OutputError, match="belongs to the input model"):
        check_output_path(tmp_path / "out.onnx", input_path=source, external_data=True, location="copy.bin")
    with pytest.raises(OutputError, match="belongs to the input model"):
        save_model(load_model(source), tmp_path / "out.onnx", input_path=source, external_data=True,
                   location="copy.bin")
    assert _snapshot(tmp_path) == before


def test_a_data_file_that_does_not_exist_yet_is_compared_by_resolved_path(tmp_path: Path) -> None:
    # the input refers to weights/w.bin, missing for now (loading it would fail); a path that resolves there,
    # through a symlinked folder, is still the input's
    _input(tmp_path, "weights/w.bin")
    (tmp_path / "weights" / "w.bin").unlink()
    (tmp_path / "alias").symlink_to(tmp_path / "weights")
    with pytest.raises(OutputError, match="reads its external data from it"):
        check_output_path(tmp_path / "alias" / "w.bin", input_path=tmp_path / "m.onnx")
    assert check_output_path(tmp_path / "alias" / "v.bin", input_path=tmp_path / "m.onnx")


def test_library_saves_refuse_an_unrelated_existing_data_file(tmp_path: Path) -> None:
    (tmp_path / "out.onnx.data").write_bytes(b"someone else's")
    with pytest.raises(OutputError, match=r"is not the data file of 'out\.onnx'"):
        save_model(_model(), tmp_path / "out.onnx", external_data=True)
    assert (tmp_path / "out.onnx.data").read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx.data"]


def test_data_files_skip_inline_weights_but_find_every_reference(tmp_path: Path) -> None:
    # the search for external-data entries skips the initializers' raw bytes (the weights of an inline model),
    # which may hold the bytes b"location" by chance; references after them, in nodes, are still found
    noise = np.frombuffer(b"location" * 512, dtype=np.float32)
    model = _model()
    model.graph.initializer.insert(0, numpy_helper.from_array(noise, "noise"))
    onnx.save(model, tmp_path / "inline.onnx")
    assert data_files(tmp_path / "inline.onnx") == frozenset()
    value = numpy_helper.from_array(WEIGHT, "v")
    _externalize(value, tmp_path, "late.bin")
    model.graph.node.append(helper.make_node("Constant", [], ["unused"], value=value))
    onnx.save(model, tmp_path / "mixed.onnx")
    assert data_files(tmp_path / "mixed.onnx") == {str((tmp_path / "late.bin").resolve())}
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07\x3a\xff\xff location")  # a graph field past the end
    assert data_files(tmp_path / "broken.onnx") == frozenset()  # not a model: nothing it could read


# --- two outputs of one command ------------------------------------------------------------------------------
def _reshape_model(folder: Path) -> Path:
    """Reshape(x, Concat(Shape(x)[0], 4)): compute-graph has a shape subgraph to drop and an engine to write."""
    from onnx import parser

    model = parser.parse_model('''<ir_version: 8, opset_import: ["" : 17]>
g (float[n, 2, 2] x) => (float[n, 4] y) <int64[1] four = {4}, int64[1] zero = {0}, int64[1] one = {1}> {
    s = Shape (x)
    b = Slice (s, zero, one)
    t = Concat <axis = 0> (b, four)
    y = Reshape (x, t)
}''')
    onnx.save(model, folder / "m.onnx")
    return folder / "m.onnx"


@pytest.mark.parametrize(("output", "engine", "setup"), [
    ("out.onnx", "out.onnx", None),                       # the case: exit 0, one output over the other
    ("out.onnx", "./sub/../out.onnx", "sub"),             # the same path spelled otherwise
    ("out.onnx", "out.onnx.data", None),                  # the model's external data file (written above 2 GB)
    ("out.onnx", "engine.json", "link"),                  # a symlink to the model output
])
def test_compute_graph_refuses_one_file_for_two_outputs(tmp_path: Path, output: str, engine: str,
                                                        setup: str | None) -> None:
    _reshape_model(tmp_path)
    if setup == "sub":
        (tmp_path / "sub").mkdir()
    if setup == "link":
        (tmp_path / "engine.json").symlink_to("out.onnx")
    before = _snapshot(tmp_path)
    result = _cli("compute-graph", "m.onnx", "-o", output, "--shape-engine", engine, "--force", cwd=tmp_path,
                  installed=True)
    _assert_refused(result, before, tmp_path, "would both be written to")


def test_compute_graph_writes_both_outputs_on_distinct_paths(tmp_path: Path) -> None:
    _reshape_model(tmp_path)
    result = _cli("compute-graph", "m.onnx", "-o", "out.onnx", "--shape-engine", "out.json", cwd=tmp_path,
                  installed=True)
    assert result.returncode == 0, result.stderr
    assert onnx.load(tmp_path / "out.onnx").graph.node and (tmp_path / "out.json").read_text().startswith("{")


def test_simplify_refuses_extractions_that_map_to_one_file(tmp_path: Path) -> None:
    """--extract-constant a/b and a_b both become out.a_b.npy: the second was written over the first."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "a/b"], ["t"]), helper.make_node("Mul", ["t", "a_b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.full(4, 2.0, np.float32), "a/b"),
         numpy_helper.from_array(np.full(4, 3.0, np.float32), "a_b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    before = _snapshot(tmp_path)
    result = _cli("simplify", "m.onnx", "-o", "out.onnx", "--extract-constant", "a/b", "--extract-constant", "a_b",
                  cwd=tmp_path, installed=True)
    _assert_refused(result, before, tmp_path, "--extract-constant a/b and --extract-constant a_b would both be")


def test_several_models_with_one_name_are_refused_before_any_work(tmp_path: Path) -> None:
    for folder in ("a", "b", "out"):
        (tmp_path / folder).mkdir()
        if folder != "out":
            onnx.save(_model(), tmp_path / folder / "m.onnx")
    before = _snapshot(tmp_path)
    result = _cli("optimize", "a/m.onnx", "b/m.onnx", "-o", "out/", cwd=tmp_path, installed=True)
    _assert_refused(result, before, tmp_path, "would both be written to")
