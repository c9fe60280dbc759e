"""``--report FILE.html`` through the installed ``gsrewrite`` script, as people run it: optimize on the example BERT
and on a small CNN, simplify, apply, compress; ``--json`` names the report; the paths it must never take."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from report_models import Page, save_cnn

ROOT = Path(__file__).resolve().parent.parent
GSREWRITE = Path(sys.executable).parent / "gsrewrite"
BERT = ROOT / "examples" / "bert-tiny.onnx"


def _run(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GSREWRITE), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def _counted(page: Page) -> dict[str, int]:
    counts: dict[str, int] = {}
    for region in page.regions():
        name = region["data-pattern"] or ""
        counts[name] = counts.get(name, 0) + int(region["data-count"] or 0)
    return counts


def test_optimize_bert_reports_every_fused_region(tmp_path):
    done = _run("optimize", BERT, tmp_path / "out.onnx", "--report", tmp_path / "r.html", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["report"] == str(tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    page = Page(html)
    assert _counted(page) == {name: n for name, n in data["counts"].items() if n}
    assert {r["data-count"] for r in page.regions() if r["data-pattern"] == "layernorm"} == {"5"}
    assert all(link in page.ids for link in page.links)
    assert {"changed", "why-not", "why-skipped", "why-near-miss", "bought", "validation"} <= page.ids
    assert html.count("<tr><td>sample</td>") == 1 and len(data["validation"]["sizes"]) == 1
    assert len(html) < 300_000


def test_optimize_a_cnn_reports_its_conv_bn_regions(tmp_path):
    model = save_cnn(tmp_path)
    done = _run("optimize", model, "-o", tmp_path / "out.onnx", "--report", tmp_path / "r.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"Wrote report {tmp_path / 'r.html'}" in done.stdout
    page = Page((tmp_path / "r.html").read_text(encoding="utf-8"))
    assert _counted(page) == {"conv-bn": 4}  # 3 -> 8 channels, then three 8 -> 8 blocks: two groups
    assert [r["data-count"] for r in page.regions()] == ["1", "3"]
    before, after = page.svgs[0], page.svgs[1]
    assert "BatchNormalization" in before and "Conv" in before
    assert "Conv" in after and "BatchNormalization" not in after


def test_simplify_and_apply_write_their_reports(tmp_path):
    model = save_cnn(tmp_path, blocks=2)
    done = _run("simplify", model, tmp_path / "s.onnx", "--report", tmp_path / "s.html", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _counted(Page((tmp_path / "s.html").read_text(encoding="utf-8"))) == {"conv-bn": 2}
    done = _run("apply", "-p", "layernorm", BERT, tmp_path / "a.onnx", "--report", tmp_path / "a.html",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = Page((tmp_path / "a.html").read_text(encoding="utf-8"))
    assert _counted(page) == {"layernorm": 5} and "why-no-candidate" not in page.ids


def test_compress_reports_its_tolerance(tmp_path):
    model = save_cnn(tmp_path, blocks=2)
    done = _run("compress", model, tmp_path / "c.onnx", "-s", "fp16", "--bench-runs", "0", "--report",
                tmp_path / "c.html", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["report"] == str(tmp_path / "c.html")
    html = (tmp_path / "c.html").read_text(encoding="utf-8")
    assert "id='compression'" in html and "the fp16 strategy&#x27;s tolerance" in html


@pytest.mark.parametrize("where", ["output", "input", "inputs"])
def test_the_report_never_takes_another_file_of_the_command(tmp_path, where):
    model = save_cnn(tmp_path, blocks=1)
    np_inputs = tmp_path / "in.npz"
    np_inputs.write_bytes(b"")
    target = {"output": tmp_path / "out.onnx", "input": model, "inputs": np_inputs}[where]
    done = _run("optimize", model, "-o", tmp_path / "out.onnx", "--inputs", np_inputs, "--report", target,
                cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert ("the report (--report)" if where == "output" else "refusing to overwrite") in done.stderr
    assert not (tmp_path / "out.onnx").exists() and model.stat().st_size and np_inputs.exists()


def test_one_report_for_one_model(tmp_path):
    model = save_cnn(tmp_path, blocks=1)
    other = tmp_path / "other.onnx"
    other.write_bytes(model.read_bytes())
    (tmp_path / "out").mkdir()
    done = _run("optimize", model, other, "-o", tmp_path / "out", "--report", tmp_path / "r.html", cwd=tmp_path)
    assert done.returncode == 2 and "--report writes one file" in done.stderr
