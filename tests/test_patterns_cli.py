"""`gsrewrite patterns list|show` and `gsrewrite optimize` on the example model."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import onnx
from click.testing import CliRunner
from ort_sessions import count_sessions

from gsrewrite.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "bert-tiny.onnx"


def test_patterns_list_json_has_every_family():
    result = CliRunner().invoke(main, ["patterns", "list", "--json"])
    assert result.exit_code == 0, result.output
    entries = {e["name"]: e for e in json.loads(result.stdout)}
    assert {"layernorm", "gelu-erf", "fastgelu", "mha", "conv-bn", "matmul-add", "rmsnorm"} <= set(entries)
    assert entries["mha"]["targets"] == ["ort", "onnx"] and entries["mha"]["variants"] > 1
    assert entries["layernorm"]["provider"].startswith("plugin 'builtin:patterns'")


def test_patterns_show_prints_the_templates():
    result = CliRunner().invoke(main, ["patterns", "show", "layernorm"])
    assert result.exit_code == 0, result.output
    assert "ReduceMean <axes = @axes" in result.stdout and "LayerNormalization" in result.stdout


def test_patterns_show_unknown_name_exits_2():
    result = CliRunner().invoke(main, ["patterns", "show", "no-such"])
    assert result.exit_code == 2 and "unknown pattern or family 'no-such'" in result.stderr


def test_optimize_the_example(tmp_path):
    out = tmp_path / "bert.opt.onnx"
    result = CliRunner().invoke(main, ["optimize", str(EXAMPLE), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["validation"]["ok"] and report["nodes_after"] < report["nodes_before"]
    ops = Counter(n.op_type for n in onnx.load(str(out)).graph.node)
    assert ops["Attention"] == 2 and ops["Softmax"] == 0 and ops["Erf"] == 0  # packed QKV attention


def test_optimize_for_each_device(tmp_path):
    """cpu (default): residual Sums before LayerNormalization; gpu: onnxruntime's SkipLayerNormalization."""
    ops = {}
    for device in ("cpu", "gpu"):
        out = tmp_path / f"bert.{device}.onnx"
        result = CliRunner().invoke(main, ["optimize", str(EXAMPLE), "-o", str(out), "--device", device, "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["validation"]["ok"]
        ops[device] = Counter(n.op_type for n in onnx.load(str(out)).graph.node)
        other = "skip-layernorm" if device == "cpu" else "skip-layernorm-sum"
        assert f"not {device}" in report["skipped"][other]
    assert ops["cpu"]["SkipLayerNormalization"] == 0 and ops["cpu"]["Sum"] == 4
    assert ops["gpu"]["SkipLayerNormalization"] == 4 and ops["gpu"]["Sum"] == 0
    assert ops["cpu"]["LayerNormalization"] == ops["gpu"]["LayerNormalization"] + 4


def test_an_unknown_device_exits_2(tmp_path):
    out = tmp_path / "x.onnx"
    result = CliRunner().invoke(main, ["optimize", str(EXAMPLE), "-o", str(out), "--device", "tpu"])
    assert result.exit_code == 2 and "tpu" in result.stderr and not out.exists()


def test_optimizing_an_optimized_model_changes_nothing_and_runs_no_session(tmp_path, monkeypatch):
    once, twice = tmp_path / "once.onnx", tmp_path / "twice.onnx"
    assert CliRunner().invoke(main, ["optimize", str(EXAMPLE), "-o", str(once)]).exit_code == 0
    sessions = count_sessions(monkeypatch)
    result = CliRunner().invoke(main, ["optimize", str(once), "-o", str(twice), "--json"])
    assert result.exit_code == 0, result.output
    # the original is loaded (it must be runnable); nothing is compared
    assert len(sessions.created) == 1 and not sessions.ran
    report = json.loads(result.stdout)
    assert report["validation"] is None and report["nodes_after"] == report["nodes_before"]
    assert onnx.load(str(twice)).graph == onnx.load(str(once)).graph


def test_optimize_starts_the_reference_run_during_the_cleanup(monkeypatch):
    import importlib

    from gsrewrite.validation.background import BackgroundValidator

    apply_module = importlib.import_module("gsrewrite.pipelines.apply")
    optimize_module = importlib.import_module("gsrewrite.pipelines.optimize")

    events = []
    init, simplified, rewrite = BackgroundValidator.__init__, optimize_module._simplified, apply_module._rewrite
    monkeypatch.setattr(BackgroundValidator, "__init__",
                        lambda self, *a, **k: events.append("reference") or init(self, *a, **k))
    monkeypatch.setattr(optimize_module, "_simplified", lambda *a: (simplified(*a), events.append("cleanup"))[0])
    monkeypatch.setattr(apply_module, "_rewrite", lambda *a: events.append("fusions") or rewrite(*a))
    result = optimize_module.optimize(str(EXAMPLE))
    assert result.validation.ok and events == ["reference", "cleanup", "fusions"]  # once, before the cleanup ended


LINT_CASES = {
    "unknown_op.toml": ('family = "t"\n[[pattern]]\nname = "p"\nmatch = """\ng (x) => (y) {\n'
                        '  y = Reluu (x)\n}\n"""\nreplace = "g (x) => (y) { y = Relu (x) }"\n', ":6:",
                        "unknown ONNX op"),
    "fragment.toml": ('family = "t"\n[[fragment]]\nname = "Sq"\nforms = ["Sq (x) => (y) { y = Mul (x, x) }"]\n'
                      '[[pattern]]\nname = "p"\nmatch = """\ng (x) => (y) {\n  s = Sq (x)\n  y = Relu (s)\n}\n"""\n'
                      'replace = "g (x) => (y) { y = Relu (x) }"\n', ":9:", "call it as alt.Sq"),
}


def test_patterns_check_reports_file_and_line_and_accepts_custom_domains(tmp_path):
    import subprocess
    import sys

    gsrewrite_bin = Path(sys.executable).parent / "gsrewrite"
    for name, (text, line, message) in LINT_CASES.items():
        (tmp_path / name).write_text(text)
        done = subprocess.run([str(gsrewrite_bin), "patterns", "check", name], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"{name}{line}" in done.stdout and message in done.stdout, done.stdout
    (tmp_path / "custom.toml").write_text('family = "t"\n[[pattern]]\nname = "p"\n'
                                          'match = "g (x) => (y) { n = Neg (x)  y = Neg (n) }"\n'
                                          'replace.ort = "g (x) => (y) { y = com.microsoft.NoSuchOp (x) }"\n')
    good = subprocess.run([str(gsrewrite_bin), "patterns", "check", "custom.toml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert good.returncode == 0 and "custom.toml: ok (1 pattern)" in good.stdout


def test_the_shipped_pattern_files_pass_the_check():
    import subprocess
    import sys

    files = sorted(str(p) for p in (Path(__file__).resolve().parent.parent / "patterns").rglob("*.toml"))
    done = subprocess.run([str(Path(sys.executable).parent / "gsrewrite"), "patterns", "check", *files],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok (") == len(files) > 5


def test_patterns_show_takes_a_family_and_suggests_on_a_typo():
    import subprocess
    import sys

    gsrewrite_bin = str(Path(sys.executable).parent / "gsrewrite")
    family = subprocess.run([gsrewrite_bin, "patterns", "show", "gelu", "--json"], capture_output=True, text=True,
                            timeout=120)
    shown = json.loads(family.stdout)
    assert family.returncode == 0 and len(shown) >= 2 and {p["family"] for p in shown} == {"gelu"}
    typo = subprocess.run([gsrewrite_bin, "patterns", "show", "layernrm"], capture_output=True, text=True, timeout=120)
    assert typo.returncode == 2 and "did you mean 'layernorm'" in typo.stderr
    assert typo.stderr.count("'layernorm'") == 1
