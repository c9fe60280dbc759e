"""The paths and verbosity conventions of the rewriting commands, through the installed console script.

``gsrewrite optimize|apply|simplify IN [OUT]``, ``-o OUT``, no output (``IN_STEM.opt.onnx``, never over an
existing file without ``--force``), several models with ``-o FOLDER`` and ``-j``, one "Wrote" line, ``-q``/``-v``
after the subcommand, one report format, binary units.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import helper

GSREWRITE = Path(sys.executable).parent / "gsrewrite"


def _model(path: Path, with_noop: bool = True) -> Path:
    """y = Relu(Identity(x)) (Identity is removed by the cleanup), or y = Relu(x)."""
    nodes = [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])] if with_noop \
        else [helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GSREWRITE), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


PlainRun = Callable[[str], tuple[Path, subprocess.CompletedProcess[str]]]


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> PlainRun:
    """``gsrewrite COMMAND m.onnx out.onnx`` on the Identity + Relu model (:func:`_model`), without options: its
    folder and result. Each command runs once for all the tests that only read what it printed and wrote."""
    runs: dict[str, tuple[Path, subprocess.CompletedProcess[str]]] = {}

    def run(command: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
        if command not in runs:
            folder = tmp_path_factory.mktemp(command)
            _model(folder / "m.onnx")
            runs[command] = folder, _run(command, "m.onnx", "out.onnx", cwd=folder)
        return runs[command]

    return run


@pytest.mark.parametrize("command", ["optimize", "apply", "simplify"])
def test_positional_output_and_one_wrote_line(plain_run: PlainRun, command: str) -> None:
    folder, done = plain_run(command)
    assert done.returncode == 0, done.stderr
    assert onnx.load(folder / "out.onnx").graph.output[0].name == "y"
    wrote = [line for line in done.stdout.splitlines() if line.startswith("Wrote")]
    assert wrote == [f"Wrote out.onnx ({(folder / 'out.onnx').stat().st_size} B)"]


def test_no_output_goes_beside_the_input_and_is_never_overwritten_without_force(tmp_path: Path) -> None:
    _model(tmp_path / "m.onnx")
    first = _run("optimize", "m.onnx", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    default = tmp_path / "m.opt.onnx"
    assert "Identity" not in {n.op_type for n in onnx.load(default).graph.node}
    default.write_bytes(b"mine")
    again = _run("optimize", "m.onnx", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr and "Traceback" not in again.stderr
    assert default.read_bytes() == b"mine"
    forced = _run("optimize", "m.onnx", "--force", cwd=tmp_path)
    assert forced.returncode == 0 and onnx.load(default).graph.node


def test_a_second_existing_model_is_not_taken_as_the_output(tmp_path: Path) -> None:
    _model(tmp_path / "a.onnx")
    before = _model(tmp_path / "b.onnx", with_noop=False).read_bytes()
    done = _run("simplify", "a.onnx", "b.onnx", cwd=tmp_path)
    assert done.returncode == 2 and "-o FOLDER" in done.stderr
    assert (tmp_path / "b.onnx").read_bytes() == before


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_several_models_into_a_folder(tmp_path: Path, jobs: str) -> None:
    for name in ("a", "b", "c"):
        _model(tmp_path / f"{name}.onnx")
    (tmp_path / "out").mkdir()
    done = _run("optimize", "a.onnx", "b.onnx", "c.onnx", "-o", "out", "-j", jobs, "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.onnx", "b.onnx", "c.onnx"]
    assert [line.split()[1] for line in done.stdout.splitlines()] == [f"out/{n}.onnx" for n in "abc"]


def test_several_models_need_a_folder(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        _model(tmp_path / f"{name}.onnx")
    done = _run("optimize", "a.onnx", "b.onnx", "c.onnx", cwd=tmp_path)
    assert done.returncode == 2 and "-o FOLDER" in done.stderr
    assert not list(tmp_path.glob("*.opt.onnx"))


def test_quiet_after_the_subcommand_prints_only_the_wrote_line(tmp_path: Path) -> None:
    _model(tmp_path / "m.onnx")
    done = _run("simplify", "m.onnx", "-o", "s.onnx", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"Wrote s.onnx ({(tmp_path / 's.onnx').stat().st_size} B)"]


def test_one_report_format_for_every_rewriting_command(plain_run: PlainRun) -> None:
    titles = {}
    for command in ("optimize", "simplify"):
        out = plain_run(command)[1].stdout
        titles[command] = [line for line in out.splitlines() if line.startswith(("Before / after", "size"))]
    assert titles["optimize"][0] == titles["simplify"][0] == "Before / after (changed ops)"
    assert all("B" in line for line in titles["optimize"][1:])


def test_optimize_reports_cleanup_changes_and_json_names_the_output(tmp_path: Path, plain_run: PlainRun) -> None:
    _model(tmp_path / "m.onnx")
    done = _run("optimize", "m.onnx", "o.onnx", "--json", cwd=tmp_path)
    data = json.loads(done.stdout)
    assert data["changed"] and data["passes"] and data["output"] == "o.onnx"
    text = plain_run("optimize")[1].stdout
    assert "Nothing changed" not in text and "eliminate-noops" in text


def test_library_results_have_a_readable_report(tmp_path: Path) -> None:
    import gsrewrite

    result = gsrewrite.optimize(str(_model(tmp_path / "m.onnx")))
    text = result.report()
    assert "Before / after" in text and "Identity" in text and "Validation: OK" in text


TWO_PATTERNS = '''
family = "mine"

[[pattern]]
name = "neg-neg"
description = "Neg(Neg(x)) -> x"
match = "g (x) => (y) { n = Neg (x)  y = Neg (n) }"
replace = "g (x) => (y) { y = Identity (x) }"

[[pattern]]
name = "relu-relu"
description = "Relu(Relu(x)) -> Relu(x)"
match = "g (x) => (y) { r = Relu (x)  y = Relu (r) }"
replace = "g (x) => (y) { y = Relu (x) }"
'''


def test_pattern_file_patterns_are_selectable_by_name(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(TWO_PATTERNS)
    model = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[4, 8] x) => '
                                    '(float[4, 8] y, float[4, 8] z) { n = Neg (x)  y = Neg (n)  r = Relu (x)  '
                                    'z = Relu (r) }')
    onnx.save(model, tmp_path / "m.onnx")
    done = _run("apply", "m.onnx", "o.onnx", "--pattern-file", "p.toml", "--pattern", "relu-relu", "--json",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"] == {"relu-relu": 1}
    both = _run("apply", "m.onnx", "o2.onnx", "--pattern-file", "p.toml", "--json", cwd=tmp_path)
    assert json.loads(both.stdout)["counts"] == {"neg-neg": 1, "relu-relu": 1}


def _rate_model(path: Path, computed_rate: bool = False) -> Path:
    """If (sr == 16000) then x * 2 else Reshape(x, [sr, 5]): only a real sample rate runs. ``computed_rate``: the
    16000 is computed at run time (Shape(x)[1] * 1000), so the graph names no value to try."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16])
    sr = helper.make_tensor_value_info("sr", onnx.TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Unsqueeze", ["sr", "zero"], ["u"]),
                                helper.make_node("Concat", ["u", "five"], ["shape"], axis=0),
                                helper.make_node("Reshape", ["x", "shape"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Identity", ["sr"], ["sr2"]), helper.make_node("Equal", ["sr2", "ref"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    if computed_rate:
        nodes[1:1] = [helper.make_node("Shape", ["x"], ["xs"], start=1, end=2),
                      helper.make_node("Squeeze", ["xs"], ["n"]),
                      helper.make_node("Mul", ["n", "thousand"], ["ref"])]
    inits = [helper.make_tensor("ref" if not computed_rate else "thousand", onnx.TensorProto.INT64, [],
                                [16000 if not computed_rate else 1000]),
             helper.make_tensor("two", onnx.TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("zero", onnx.TensorProto.INT64, [1], [0]),
             helper.make_tensor("five", onnx.TensorProto.INT64, [1], [5])]
    graph = helper.make_graph(nodes, "g", [x, sr], [y], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_an_input_compared_with_a_constant_takes_that_value(tmp_path: Path) -> None:
    """silero's VAD: the sample rate the graph compares ``sr`` with is what validation feeds it (no --inputs)."""
    _rate_model(tmp_path / "vad.onnx")
    done = _run("simplify", "vad.onnx", "v.onnx", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "v.onnx").exists()


def test_a_random_value_deciding_control_flow_is_named_with_the_fix(tmp_path: Path) -> None:
    import numpy as np

    _rate_model(tmp_path / "vad.onnx", computed_rate=True)
    done = _run("simplify", "vad.onnx", "v.onnx", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "'sr'" in done.stderr and "--inputs" in done.stderr
    assert not (tmp_path / "v.onnx").exists()
    np.savez(tmp_path / "real.npz", x=np.ones((1, 16), np.float32), sr=np.array(16000, np.int64))
    fixed = _run("simplify", "vad.onnx", "v.onnx", "--inputs", "real.npz", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr


def test_a_model_nothing_applies_to_is_written_as_it_was(tmp_path: Path) -> None:
    _rate_model(tmp_path / "m.onnx")  # its branches read outer initializers: an export would move them
    onnx.save(onnx.load(tmp_path / "m.onnx"), tmp_path / "m.onnx")
    model = onnx.load(tmp_path / "m.onnx")
    del model.graph.node[0]  # no Identity: nothing for simplify to do
    model.graph.node[0].input[0] = "sr"
    onnx.save(model, tmp_path / "m.onnx")
    done = _run("simplify", "m.onnx", "s.onnx", "--no-validate", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "s.onnx").read_bytes() == (tmp_path / "m.onnx").read_bytes()


def test_verbose_after_the_subcommand_shows_stage_timings(tmp_path: Path, plain_run: PlainRun) -> None:
    _model(tmp_path / "m.onnx")
    done = _run("optimize", "m.onnx", "o.onnx", "-v", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    stage_line = r": [0-9.]+ s, peak RSS [0-9.]+ GB( \([0-9.]+x weights\))?$"  # a ratio when it has weights
    timed = [line for line in done.stderr.splitlines() if re.search(stage_line, line)]
    assert {line.split(": ")[1] for line in timed} >= {"simplifying", "rewriting", "validating"}
    quiet = plain_run("optimize")[1]
    assert "simplifying" not in quiet.stderr


def test_a_mistyped_command_gets_a_suggestion(tmp_path: Path) -> None:
    done = _run("optimise", "m.onnx", cwd=tmp_path)
    assert done.returncode == 2 and "did you mean 'optimize'?" in done.stderr


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_json_for_several_models_is_one_list(tmp_path: Path, jobs: str) -> None:
    for name in ("a", "b"):
        _model(tmp_path / f"{name}.onnx")
    (tmp_path / "out").mkdir()
    done = _run("simplify", "a.onnx", "b.onnx", "-o", "out", "-j", jobs, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reports = json.loads(done.stdout)
    assert [r["output"] for r in reports] == ["out/a.onnx", "out/b.onnx"]


# --- options declared once -----------------------------------------------------------------------------------
#: option names declared in more than one place, and why: each place means something else by it
_SAME_NAME_OTHER_MEANING = {
    "--inputs": "extract: the tensors that become the sub-model's inputs, not input data",
    "--target": "compress: the strategy's op set (MatMulNBits or DequantizeLinear), default: the strategy's",
    "--runs": "bench: timed runs; validation: random input sets",
    "--validate": "explain: a flag, off by default (explain writes nothing); elsewhere --validate/--no-validate, on",
    "-o": "the rewriting commands' output (io_options) vs the analysis commands' extra output files",
    "--output": "as -o",
    "--force": "as -o: what each command's own output file is",
    "--check": "shapes: against onnxruntime on request; compute-graph: on by default (--check/--no-check)",
    "--top": "profile: nodes by MACs; memory: the largest buffers",
    "-v": "the group's log level vs the rewriting commands' -v after the subcommand (the same count)",
    "--verbose": "as -v",
    "-q": "as -v",
    "--quiet": "as -v",
}


def _declared_options() -> dict[str, list[str]]:
    """Every option name declared in gsrewrite/cli (click.option calls and the criterion table) -> where."""
    import ast

    found: dict[str, list[str]] = {}
    for path in sorted((Path(__file__).resolve().parent.parent / "gsrewrite" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "option":
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                for name in names:
                    for flag in name.split("/"):
                        if flag.startswith("-"):
                            found.setdefault(flag, []).append(f"{path.name}:{node.lineno}")
    return found


def test_every_shared_option_is_declared_once():
    """--target, --device, --validate, --json, --inputs ... : one declaration each (gsrewrite/cli/_options.py),
    applied by every command that takes it; a name declared twice must mean two different things."""
    twice = {flag: where for flag, where in _declared_options().items() if len(where) > 1}
    unexplained = {flag: where for flag, where in twice.items() if flag not in _SAME_NAME_OTHER_MEANING}
    assert not unexplained, unexplained
    assert len(_declared_options()["--input-shape"]) == 1, "one --input-shape grammar, one declaration"


# --- one report format -------------------------------------------------------------------------------------------
def _matmul_model(path: Path) -> Path:
    import numpy as np
    from onnx import numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 128])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_compress_and_tune_report_like_every_rewriting_command(tmp_path: Path) -> None:
    """compress's and optimize --tune's reports are tables and lines like optimize's (aligned plain text in a
    pipe), their JSON the result's data with output, size_before and size_after."""
    _matmul_model(tmp_path / "m.onnx")
    shown = _run("compress", "m.onnx", "q.onnx", "-s", "int8", "--bench-runs", "0", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "Compression: int8" and lines[1].split() == ["before", "after", "ratio"]
    assert any(line.split()[:1] == ["file"] and line.endswith("x") for line in lines)
    assert any(line.startswith("Outputs vs the uncompressed model") for line in lines)
    assert lines[-1] == f"Wrote q.onnx ({(tmp_path / 'q.onnx').stat().st_size / 1024:.1f} KiB)"
    data = json.loads(_run("compress", "m.onnx", "q2.onnx", "-s", "int8", "--bench-runs", "0", "--json",
                           cwd=tmp_path).stdout)
    assert data["output"] == "q2.onnx" and data["size_after"] == (tmp_path / "q2.onnx").stat().st_size
    assert data["size_before"] > data["size_after"] and data["strategy"] == "int8"
    tuned = _run("optimize", "m.onnx", "t.onnx", "--tune", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    text = tuned.stdout.splitlines()
    title = text.index("Tune: onnxruntime latency per candidate (min of interleaved runs)")
    assert text[title + 1].split() == ["candidate", "ms", "vs", "all", "fusions"]
    assert any(line.startswith("Tune: kept ") for line in text) and text[0] == "Before / after (changed ops)"
