"""The pipelines: one validate-and-bisect loop for patterns and passes, small public signatures, and the layers
(the engine and the simplifier never import each other, the pipelines or the CLI)."""

from __future__ import annotations

import ast
import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from click.testing import CliRunner

import gsrewrite
from gsrewrite.cli import main
from gsrewrite.errors import CannotValidateError, UsageError
from gsrewrite.pipelines import SimplifyLimits, ValidationOptions
from gsrewrite.pipelines.bisect import Candidate, Checker, validate_and_bisect
from gsrewrite.simplifier import default_pass_registry
from gsrewrite.testing import model_from_text, op_counts

ROOT = Path(__file__).resolve().parent.parent

NO_SUCH_OP = '''
family = "broken"

[[pattern]]
name = "neg-neg-to-nosuchop"
description = "emits an op onnxruntime does not know"
match = "g (x) => (y) { n = Neg (x)  y = Neg (n) }"
replace.ort = "g (x) => (y) { y = com.microsoft.NoSuchOp (x) }"

[[pattern]]
name = "relu-relu"
description = "Relu(Relu(x)) -> Relu(x) (correct)"
match = "g (x) => (y) { r = Relu (x)  y = Relu (r) }"
replace = "g (x) => (y) { y = Relu (x) }"
'''

MODEL = """
g (float[4, 8] x) => (float[4, 8] y, float[4, 8] z) {
    n = Neg (x)
    y = Neg (n)
    r = Relu (x)
    z = Relu (r)
}"""


def _runs(path: Path) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.arange(32, dtype=np.float32).reshape(4, 8) - 16})


def test_apply_drops_a_pattern_whose_result_onnxruntime_cannot_load(tmp_path):
    (tmp_path / "p.toml").write_text(NO_SUCH_OP)
    model, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model_from_text(MODEL), model)
    result = CliRunner().invoke(main, ["apply", "--pattern-file", str(tmp_path / "p.toml"), str(model), "-o",
                                       str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list(report["dropped"]) == ["neg-neg-to-nosuchop"]
    assert "NoSuchOp" in report["dropped"]["neg-neg-to-nosuchop"]
    assert report["counts"] == {"relu-relu": 1} and report["validation"]["ok"]
    assert op_counts(onnx.load(str(out))) == {"Neg": 2, "Relu": 1}  # the good pattern's work is kept
    y, z = _runs(out)
    assert np.allclose(y, np.arange(32).reshape(4, 8) - 16) and (z >= 0).all()


def test_the_human_report_says_why_a_pattern_was_dropped(tmp_path):
    (tmp_path / "p.toml").write_text(NO_SUCH_OP)
    model, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model_from_text(MODEL), model)
    result = CliRunner().invoke(main, ["apply", "--pattern-file", str(tmp_path / "p.toml"), str(model), "-o",
                                       str(out)], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert "Dropped neg-neg-to-nosuchop" in result.stdout and "NoSuchOp" in result.stdout


def test_an_original_onnxruntime_cannot_load_is_still_an_error(tmp_path):
    (tmp_path / "p.toml").write_text(NO_SUCH_OP)
    bad = model_from_text(MODEL.replace("z = Relu (r)", "z = com.microsoft.NoSuchOp (r)"),
                          extra_opsets={"com.microsoft": 1})
    with pytest.raises(CannotValidateError):
        gsrewrite.apply(bad, [], pattern_files=[tmp_path / "p.toml"])
    model = tmp_path / "bad.onnx"
    onnx.save(bad, model)
    result = CliRunner().invoke(main, ["apply", "--pattern-file", str(tmp_path / "p.toml"), str(model), "-o",
                                       str(tmp_path / "out.onnx")])
    assert result.exit_code == 2 and not (tmp_path / "out.onnx").exists()


@dataclass
class _Outcome:
    graph: gs.Graph
    modified: bool


class ReluToNoSuchOp:
    """A broken plugin pass: its result names an op onnxruntime does not have."""

    name = "relu-to-nosuchop"
    description = "emits com.microsoft.NoSuchOp"

    def run(self, graph: gs.Graph) -> _Outcome:
        relus = [n for n in graph.nodes if n.op == "Relu"]
        for node in relus:
            node.op, node.domain = "NoSuchOp", "com.microsoft"
        return _Outcome(graph, bool(relus))


def test_simplify_drops_a_pass_whose_result_onnxruntime_cannot_load(tmp_path):
    registry = default_pass_registry()
    registry.add(ReluToNoSuchOp())
    text = MODEL.replace("n = Neg (x)", "i = Identity (x)  n = Neg (i)")
    result = gsrewrite.simplify(model_from_text(text), registry=registry)
    assert list(result.dropped) == ["relu-to-nosuchop"] and "NoSuchOp" in result.dropped["relu-to-nosuchop"]
    assert result.validation.ok and op_counts(result.model) == {"Neg": 2, "Relu": 2}  # Identity still removed
    out = tmp_path / "out.onnx"
    gsrewrite.save_model(result.model, out)
    assert len(_runs(out)) == 2


def test_the_loop_is_generic_over_steps():
    """Steps are anything with a name; the guilty one is found by bisection and dropped, the rest kept."""
    base = model_from_text("g (float[2] x) => (float[2] y) { y = Relu (x) }")
    broken = model_from_text("g (float[2] x) => (float[2] y) { y = Sigmoid (x) }")
    built: list[list[str]] = []

    def build(steps: list[str]) -> Candidate[list[str]]:
        built.append(list(steps))
        return Candidate(broken if "bad" in steps else base, bool(steps), list(steps))

    checker = Checker.of(base, {})
    first = build(["a", "b", "bad", "c"])
    outcome = validate_and_bisect(first, ["a", "b", "bad", "c"], build, checker, name=str)
    assert outcome.dropped.keys() == {"bad"} and outcome.report.ok
    assert outcome.kept == ["a", "b", "c"] and outcome.candidate.detail == ["a", "b", "c"]


@pytest.mark.parametrize("name", ["apply", "optimize", "simplify"])
def test_public_entry_points_take_at_most_8_keyword_parameters(name):
    parameters = inspect.signature(getattr(gsrewrite, name)).parameters.values()
    keywords = [p for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "model"]
    assert len(keywords) <= 8, [p.name for p in keywords]


def test_validation_options_and_limits_reach_the_run():
    model = model_from_text("g (float[2, 3] x) => (float[2, 3] y) { a = Identity (x)  y = Relu (a) }")
    result = gsrewrite.simplify(model, validate=ValidationOptions(runs=3, atol=0.5),
                                limits=SimplifyLimits(max_rounds=1))
    assert result.validation.ok and result.validation.runs == 3 and result.validation.atol == 0.5
    assert result.rounds == 1
    with pytest.raises(TypeError):
        gsrewrite.apply(model, ["all"], validate="yes")  # type: ignore[arg-type]


# --- optimize owns the whole request: tune and compress in the library ----------------------------------------
def _gelu_mlp() -> onnx.ModelProto:
    """x @ W, then GELU written out (erf form): optimize fuses it (gelu-erf)."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 64)).astype(np.float32)
    return model_from_text("""
        g (float[n, 64] x) => (float[n, 64] y) {
          m = MatMul (x, w)  d = Div (m, sqrt2)  e = Erf (d)  a = Add (e, one)  p = Mul (m, a)  y = Mul (p, half)
        }""", initializers={"w": weight, "sqrt2": np.array(1.4142135, np.float32),
                            "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)})


def test_optimize_tunes_in_the_library():
    """tune=True times all fusions, each matched family left out, and the input; the kept candidate is the
    result's model, counted and validated as the result."""
    original = _gelu_mlp()
    result = gsrewrite.optimize(original, tune=True)
    tuned = result.tuned
    assert set(tuned.timings) == {"all fusions", "without gelu", "the input (no fusion)"}
    assert result.model is tuned.model and result.validation.ok
    assert bool(result.counts) == (tuned.kept == "all fusions")
    # gelu is the only family: without it (or the input itself) the model is the input, unchanged; which candidate
    # is fastest is the machine's call
    assert result.changed == (tuned.kept == "all fusions") == (result.model is not original)
    assert "tune" in result.to_dict() and f"Tune: kept {tuned.kept}" in result.report()


def test_optimize_compresses_in_the_library():
    """compress= runs the strategy on the fused model, validated against the input; the result's model, report
    and data are the compressed model's."""
    original = _gelu_mlp()
    result = gsrewrite.optimize(original, compress=gsrewrite.CompressOptions("int8", {"block_size": 32}))
    compressed = result.compressed
    assert compressed.ok and compressed.validated and result.model is compressed.model and result.serialized is None
    assert op_counts(result.model) == {"com.microsoft.MatMulNBits": 1, "com.microsoft.Gelu": 1}
    assert result.counts == {"gelu-erf": 1}
    assert result.to_dict()["compress"]["strategy"] == "int8"
    text = result.report()
    assert "Compression: int8" in text and "Outputs vs the uncompressed model" in text
    with pytest.raises(UsageError, match="no-such"):  # before any work
        gsrewrite.optimize(original, compress="no-such")


# --- layers (the full contract is import-linter's, in pyproject.toml; this is the part a unit run sees) ----
def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside functions (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def _crossings(layer: str, forbidden: tuple[str, ...]) -> set[tuple[str, str]]:
    out = set()
    for path in sorted((ROOT / "gsrewrite" / layer).rglob("*.py")):
        for module in _imports(path):
            if module.startswith(forbidden) and not module.startswith(f"gsrewrite.{layer}"):
                out.add((str(path.relative_to(ROOT)), module))
    return out


@pytest.mark.parametrize("layer, other", [("engine", "simplifier"), ("simplifier", "engine")])
def test_engine_and_simplifier_import_neither_the_pipelines_nor_the_cli_nor_each_other(layer, other):
    upward = _crossings(layer, ("gsrewrite.pipelines", "gsrewrite.cli"))
    assert not upward, upward
    sideways = {(path, _module_of(module)) for path, module in _crossings(layer, (f"gsrewrite.{other}",))}
    assert not sideways, sorted(sideways)


def test_the_graph_layer_imports_nothing_above_it():
    above = ("gsrewrite.engine", "gsrewrite.simplifier", "gsrewrite.pipelines", "gsrewrite.cli",
             "gsrewrite.patterns", "gsrewrite.validation")
    assert not _crossings("graph", above)


def _module_of(name: str) -> str:
    """``gsrewrite.graph.core.to_graph`` -> ``gsrewrite.graph.core`` (the longest prefix that is a file)."""
    parts = name.split(".")
    for end in range(len(parts), 1, -1):
        candidate = ROOT.joinpath(*parts[:end])
        if candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists():
            return ".".join(parts[:end])
    return name


def test_one_binary_search_names_the_smallest_failing_prefix_for_validation_and_compress():
    """``first_failing`` (validate_and_bisect's and compress's node bisection): the last index of the smallest
    failing prefix; a budget that runs out names nobody."""
    from gsrewrite.pipelines.bisect import first_failing

    steps = list("abcdefg")
    probes: list[list[str]] = []

    def fails(prefix: list[str]) -> bool:
        probes.append(prefix)
        return "e" in prefix

    assert first_failing(steps, fails) == 4 and len(probes) <= 3
    assert first_failing(steps, fails, more=lambda: False) is None
    assert first_failing(["x"], fails) == 0 and first_failing([], fails) is None
