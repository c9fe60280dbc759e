"""``gsrewrite explain`` gives optimize's verdict per pattern, with the reason (issue 33 item 6.5): it runs what
optimize runs (the cleanup passes, then the fusions), lists the patterns a device or contract policy skips as
optimize does, and with ``--validate`` the patterns validation drops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx

from gsrewrite.testing import model_from_text

GSREWRITE = Path(sys.executable).parent / "gsrewrite"
BERT = Path(__file__).parent.parent / "examples" / "bert-tiny.onnx"
KV = Path(__file__).parent / "fixtures" / "models" / "llama.legacy14_kv.onnx"

# a wrong rewrite: Relu becomes Sigmoid; it matches, and only validation can tell
WRONG = """
family = "wrong"
[[pattern]]
name = "relu-to-sigmoid"
description = "a wrong rewrite, for validation to drop"
match = "g (x) => (y) { y = Relu (x) }"
replace = "g (x) => (y) { y = Sigmoid (x) }"
"""


def _json(*args: str) -> dict:
    run = subprocess.run([str(GSREWRITE), *args, "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_a_pattern_skipped_by_the_device_policy_says_so_as_in_optimize(tmp_path: Path) -> None:
    explained = _json("explain", str(BERT), "-p", "skip-layernorm")
    optimized = _json("optimize", str(BERT), "-o", str(tmp_path / "out.onnx"), "-p", "skip-layernorm",
                      "--no-validate")
    assert optimized["skipped"]["skip-layernorm"].startswith("pays off on gpu only")
    assert explained["verdicts"]["skip-layernorm"] == f"skipped: {optimized['skipped']['skip-layernorm']}"
    assert explained["counts"] == optimized["counts"]  # the same cleanup first, the same matches


def test_a_pattern_skipped_by_the_contract_policy_is_listed_with_the_contract() -> None:
    verdicts = _json("explain", str(KV), "-p", "gqa-past")["verdicts"]
    assert verdicts["gqa-past"].startswith("skipped: narrows the inputs the model accepts")
    assert "--contract batch1-chunks" in verdicts["gqa-past"]
    verdicts = _json("explain", str(KV), "-p", "gqa-past", "--contract", "batch1-chunks")["verdicts"]
    assert verdicts["gqa-past"] == "applied 4, not validated (--validate runs it)"


def test_validate_reports_what_validation_drops(tmp_path: Path) -> None:
    pattern, model = tmp_path / "wrong.toml", tmp_path / "relu.onnx"
    pattern.write_text(WRONG)
    onnx.save(model_from_text("g (float[2, 4] x) => (float[2, 4] y) { y = Relu (x) }"), model)
    plain = _json("explain", "--pattern-file", str(pattern), str(model))
    assert plain["verdicts"]["relu-to-sigmoid"] == "applied 1, not validated (--validate runs it)"
    checked = _json("explain", "--pattern-file", str(pattern), str(model), "--validate")
    assert checked["verdicts"]["relu-to-sigmoid"].startswith("dropped by validation: "), checked["verdicts"]
    table = subprocess.run([str(GSREWRITE), "explain", "--pattern-file", str(pattern), str(model), "--validate"],
                           capture_output=True, text=True, timeout=300)
    assert "dropped by validation" in table.stdout
