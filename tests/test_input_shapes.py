"""One ``--input-shape`` for every command: one grammar (``NAME:2x16``, ``NAME:2,16``, brackets, expressions,
``SYMBOL=INT``), one parser (gsrewrite.shapes.input_shapes), one option declaration, and names checked against the
model with a did-you-mean. The CLI is run as users run it: the installed console script, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from gsrewrite.errors import UsageError
from gsrewrite.shapes import symdim
from gsrewrite.shapes.input_shapes import InputShapes, as_input_shapes, check_names, parse_input_shapes
from gsrewrite.testing import model_from_text

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
SEQ = symdim.sym("seq")


# --- the grammar ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "shapes", "bindings"),
    [
        ("ids:2x16", {"ids": [2, 16]}, {}),
        ("ids:2,16", {"ids": [2, 16]}, {}),
        ("ids:[2, 16]", {"ids": [2, 16]}, {}),
        ("ids:(2,16)", {"ids": [2, 16]}, {}),
        ("ids: 2 x 16 ", {"ids": [2, 16]}, {}),
        ("scalar:[]", {"scalar": []}, {}),
        ("input:0:4x4", {"input:0": [4, 4]}, {}),
        ("ids:2,seq", {"ids": [2, SEQ]}, {}),
        ("ids:[2, 2*seq + 1]", {"ids": [2, symdim.add(symdim.mul(SEQ, 2), 1)]}, {}),
        ("ids:max_len", {"ids": [symdim.sym("max_len")]}, {}),
        ("batch=2", {}, {"batch": 2}),
        (" batch = 2 ", {}, {"batch": 2}),
    ],
)
def test_one_grammar(spec: str, shapes: dict[str, list[Any]], bindings: dict[str, int]) -> None:
    given = parse_input_shapes([spec])
    assert (given.shapes, given.bindings) == (shapes, bindings)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("x", "expected NAME:2x16"),
        (":1x2", "expected NAME:2x16"),
        ("=2", "expected NAME:2x16"),
        ("x:", "expected NAME:2x16"),
        ("x:1x", "is not a dim"),
        ("x:1,,2", "is not a dim"),
        ("x:2xseq", "x separates numbers only: write 2,seq"),
        ("x:-1,2", "negative"),
        ("batch=", "non-negative integer"),
        ("batch=-1", "non-negative integer"),
        ("batch=1.5", "non-negative integer"),
        ("batch=\u00b2", "non-negative integer"),  # str.isdigit() says yes, int() says no
        ("x:\u0663x5", "is not a dim"),
    ],
)
def test_bad_syntax_is_one_usage_error(spec: str, words: str) -> None:
    with pytest.raises(UsageError, match=words.replace("(", r"\(")) as caught:
        parse_input_shapes([spec])
    assert "\n" not in str(caught.value)


def test_a_name_given_twice_must_agree() -> None:
    assert parse_input_shapes(["batch=2", "batch=2", "x:1x2", "x:1,2"]).bindings == {"batch": 2}
    with pytest.raises(UsageError, match="'batch' is already given"):
        parse_input_shapes(["batch=2", "batch=3"])
    with pytest.raises(UsageError, match="'x' is already given"):
        parse_input_shapes(["x:1x2", "x:2x2"])


def test_the_library_forms_are_the_same_values() -> None:
    parsed = parse_input_shapes(["ids:2,seq", "seq=8"])
    assert as_input_shapes({"ids": (2, "seq"), "seq": np.int64(8)}) == parsed
    assert as_input_shapes(["ids:2,seq", "seq=8"]) == parsed
    assert as_input_shapes(parsed) is parsed
    assert not as_input_shapes(None) and not InputShapes()
    for bad in ({"batch": True}, {"batch": -1}, {"ids": (1, 2.5)}, {"ids": ["2x"]}):
        with pytest.raises(UsageError, match="bad input shape"):
            as_input_shapes(bad)


def test_sizes_bind_the_expressions() -> None:
    given = parse_input_shapes(["ids:2,2*seq", "seq=8"])
    assert given.sizes("ids") == (2, 16)
    with pytest.raises(UsageError, match="give seq=N too"):
        parse_input_shapes(["ids:2,seq"]).sizes("ids")


def test_unknown_names_say_what_was_meant() -> None:
    inputs, symbols = ["input_ids", "attention_mask"], ["batch", "sequence"]
    with pytest.raises(UsageError, match=r"not a symbol of the model \(did you mean 'sequence'\?\)"):
        check_names(parse_input_shapes(["seq=128"]), inputs, symbols)
    with pytest.raises(UsageError, match=r"not an input of the model \(did you mean 'input_ids'\?\)"):
        check_names(parse_input_shapes(["input_idz:2x16"]), inputs, symbols)
    with pytest.raises(UsageError, match="'batch' is a symbol: give its size"):
        check_names(parse_input_shapes(["batch:2"]), inputs, symbols)
    with pytest.raises(UsageError, match="'input_ids' is an input: give its shape"):
        check_names(parse_input_shapes(["input_ids=2"]), inputs, symbols)
    check_names(parse_input_shapes(["input_ids:2,seq", "seq=4", "batch=2"]), inputs, symbols)  # seq: introduced


# --- every command, through the installed script ---------------------------------------------------------
MODEL = """
g (float[batch, sequence] a, float[batch, 4] b) => (float[batch, sequence] y, float[batch, 2] z) {
    r = Relu (a)
    i = Identity (r)
    s = Shape (a)
    t = Reshape (i, s)
    y = Add (a, t)
    m = MatMul (b, w)
    z = Add (m, bias)
}"""
#: both grammars in one command line
BOTH = ["--input-shape", "a:3x5", "--input-shape", "b:3,4"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("input_shapes")
    rng = np.random.default_rng(0)
    onnx.save(model_from_text(MODEL, initializers={"w": rng.normal(size=(4, 2)).astype(np.float32),
                                                   "bias": rng.normal(size=2).astype(np.float32)}), path / "m.onnx")
    return path


def _run(folder: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GSREWRITE), *args], cwd=folder, capture_output=True, text=True, timeout=300)


def _inputs_of(path: Path) -> dict[str, list[int | str]]:
    return {i.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in i.type.tensor_type.shape.dim]
            for i in onnx.load(path).graph.input}


def _validated(report: dict[str, Any]) -> dict[str, list[int]]:
    return {name: v["shape"] for name, v in report["validation"]["inputs"].items()}


#: command line -> what shows the sizes were used (from the JSON report and the files written)
COMMANDS: dict[str, tuple[list[str], Callable[[dict[str, Any], Path], object]]] = {
    "validate": (["validate", "m.onnx", "m.onnx", "--json"],
                 lambda r, f: {n: v["shape"] for n, v in r["inputs"].items()}),
    "optimize": (["optimize", "m.onnx", "o.onnx", "--force", "--json"], lambda r, f: _validated(r)),
    "apply": (["apply", "--pattern", "matmul-add", "m.onnx", "p.onnx", "--force", "--json"],
              lambda r, f: _validated(r)),
    "simplify": (["simplify", "m.onnx", "s.onnx", "--force", "--json"], lambda r, f: _inputs_of(f / "s.onnx")),
    "bench": (["bench", "m.onnx", "--runs", "1", "--warmup", "0", "--json"], lambda r, f: r["inputs"]),
    "extract": (["extract", "m.onnx", "--inputs", "a,b", "--outputs", "r,m", "-o", "e.onnx", "--json"],
                lambda r, f: {c["name"]: c["shape"] for c in r["comparisons"]}),
    "shapes": (["shapes", "m.onnx", "--json"], lambda r, f: r["inputs"]),
    "profile": (["profile", "m.onnx", "--format", "json", "--no-sparsity"], lambda r, f: r["total"]["macs"]),
    "memory": (["memory", "m.onnx", "--json"], lambda r, f: r["input_bytes"]),
    "compute-graph": (["compute-graph", "m.onnx", "-o", "c.onnx", "--shape-engine", "c.json", "--force", "--json"],
                      lambda r, f: _inputs_of(f / "c.onnx")),
}
SIZED = {"a": [3, 5], "b": [3, 4]}
EXPECTED: dict[str, object] = {
    "validate": SIZED, "optimize": SIZED, "apply": SIZED, "simplify": SIZED, "bench": SIZED, "shapes": SIZED,
    "compute-graph": SIZED, "extract": {"r": [3, 5], "m": [3, 2]},
    "profile": 3 * 5 * 2 + 3 * 4 * 2 + 3 * 2,  # Relu, Add; MatMul; bias Add
    "memory": 4 * (3 * 5 + 3 * 4),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_takes_both_grammars(folder: Path, command: str) -> None:
    args, seen = COMMANDS[command]
    done = _run(folder, [*args, *BOTH])
    assert done.returncode == 0, done.stderr
    assert seen(json.loads(done.stdout), folder) == EXPECTED[command]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_a_symbol_the_model_does_not_have(folder: Path, command: str) -> None:
    """README's `profile --input-shape seq=128` on a model whose symbol is `sequence` was silently ignored."""
    args, _ = COMMANDS[command]
    args = [a if a == "m.onnx" or "." not in a else a.replace(".", ".typo.") for a in args]  # nothing is written
    done = _run(folder, [*args, "--input-shape", "seq=128"])
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "did you mean 'sequence'?" in done.stderr and "Traceback" not in done.stderr
    assert not list(folder.glob("*.typo.*"))


@pytest.mark.parametrize("command", ["validate", "shapes"])
def test_expressions_where_a_command_can_use_them(folder: Path, command: str) -> None:
    """The analysis commands keep a symbol symbolic; the commands that run the model size it from SYMBOL=INT."""
    args, seen = COMMANDS[command]
    done = _run(folder, [*args, "--input-shape", "a:3,n", "--input-shape", "b:3,4", "--input-shape", "n=5"])
    assert done.returncode == 0, done.stderr
    assert seen(json.loads(done.stdout), folder) == SIZED
    if command == "shapes":
        symbolic = _run(folder, [*args, "--input-shape", "a:3,2*n"])
        assert symbolic.returncode == 0, symbolic.stderr
        assert json.loads(symbolic.stdout)["outputs"]["y"] == [3, "2*n"]
    else:
        unsized = _run(folder, [*args, "--input-shape", "a:3,n"])
        assert unsized.returncode == 2 and "give n=N too" in unsized.stderr, unsized.stderr


def test_several_models_hand_the_values_to_their_workers(folder: Path) -> None:
    """``-j 2`` runs each model in its own process with the options as typed."""
    (folder / "out").mkdir(exist_ok=True)
    (folder / "n.onnx").write_bytes((folder / "m.onnx").read_bytes())
    done = _run(folder, ["simplify", "m.onnx", "n.onnx", "-o", "out", "-j", "2", *BOTH, "--no-validate"])
    assert done.returncode == 0, done.stderr
    assert _inputs_of(folder / "out" / "m.onnx") == _inputs_of(folder / "out" / "n.onnx") == SIZED
