"""Names from a model are shown safely (issue 24, item 6).

* ``profile --format csv``: a cell a spreadsheet would run as a formula (``= + - @``, tab, carriage return first)
  gets a leading ``'``; numbers, negative ones too, stay numbers.
* Every table and message of every command shows control characters (newlines, ESC and OSC sequences, C1
  controls, bidirectional controls) escaped as ``--json`` does (``\\n``, ``\\u001b``, ``\\u202e``): a model cannot
  draw on, retitle or link from the user's terminal, nor make a name read backwards.

Through the installed console script, on models whose names hold such characters.
"""

from __future__ import annotations

import csv
import io
import logging
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from hostile.runner import GSREWRITE
from onnx import TensorProto, helper

#: a newline, a colour (CSI), a hyperlink (OSC 8, ended by BEL), a C1 CSI (clear screen), a right-to-left override,
#: an isolate
HOSTILE = "a\nb\x1b[31mRED\x1b]8;;http://evil.example\x07link\x1b]8;;\x07\x9b2J\u202eevil\u2066"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066")
ESCAPED = "a\\nb\\u001b[31mRED\\u001b]8;;http://evil.example\\u0007link\\u001b]8;;\\u0007\\u009b2J\\u202eevil\\u2066"


def _gsrewrite(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GSREWRITE), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture
def hostile_model(tmp_path: Path) -> Path:
    """Tensors, a node, an input dim, the graph output, the producer and metadata named with HOSTILE."""
    nodes = [helper.make_node("Relu", ["x"], [HOSTILE], name="relu" + HOSTILE),
             helper.make_node("Sigmoid", [HOSTILE], ["y" + HOSTILE], name="sigmoid")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n" + HOSTILE, 4])],
                              [helper.make_tensor_value_info("y" + HOSTILE, TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="p" + HOSTILE)
    model.metadata_props.add(key="key" + HOSTILE, value="value" + HOSTILE)
    path = tmp_path / "hostile.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("args", [
    ["info"], ["profile", "--top", "0"], ["shapes", "--all"], ["memory"], ["validate", "{model}"],
    ["extract", "--inputs", "x", "--outputs", "y" + HOSTILE, "-o", "sub.onnx"],
], ids=["info", "profile", "shapes", "memory", "validate", "extract"])
def test_names_are_escaped_in_every_table_and_line(hostile_model: Path, args: list[str]) -> None:
    command, *rest = args
    done = _gsrewrite(command, hostile_model, *[a.format(model=hostile_model) for a in rest], cwd=hostile_model.parent)
    assert done.returncode == 0, done.stderr
    for stream in (done.stdout, done.stderr):
        assert not any(raw in stream for raw in RAW), stream
    assert ESCAPED in done.stdout, done.stdout  # the name is there, escaped, on one line


def test_an_error_naming_a_tensor_is_one_escaped_line(tmp_path: Path) -> None:
    """A model refused for a tensor produced twice: the message names it, escaped, on one line."""
    name = "t\x1b]0;retitled\x07\x9b2J\u202eevil"
    nodes = [helper.make_node("Relu", ["x"], [name]), helper.make_node("Sigmoid", ["x"], [name])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])])
    path = tmp_path / "twice.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    for command in ("info", "profile", "shapes", "memory"):
        done = _gsrewrite(command, path, cwd=tmp_path)
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
        assert "t\\u001b]0;retitled\\u0007\\u009b2J\\u202eevil" in done.stderr, done.stderr
        assert not any(raw in done.stderr for raw in RAW), done.stderr


def test_profile_csv_keeps_formulas_as_text_and_numbers_as_numbers(tmp_path: Path) -> None:
    names = ['=HYPERLINK("http://evil.example","click")', "@SUM(A1:A9)", "+1+2", "-2+3", "\tcmd", "\rcmd", "-5",
             "-1.5e3", "+7", "plain", "a=b"]
    expected = ["'" + n for n in names[:6]] + names[6:]
    tensors = ["x", *(f"t{i}" for i in range(len(names)))]
    nodes = [helper.make_node("Relu", [tensors[i]], [tensors[i + 1]], name=name) for i, name in enumerate(names)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(tensors[-1], TensorProto.FLOAT, None)])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    done = subprocess.run([str(GSREWRITE), "profile", str(path), "--format", "csv"], capture_output=True, timeout=120,
                          cwd=tmp_path)  # (bytes: text mode would turn the name's carriage return into a newline)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout.decode(), newline="")))
    assert [r["name"] for r in rows] == expected
    assert all(r["macs"] == "6" and r["activation_bytes"] == "24" for r in rows)


def test_csv_on_a_terminal_escapes_control_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a pipe the CSV holds the names as they are; on a terminal (where it is read) they are escaped."""
    from gsrewrite.cli.profile_cmd import _csv

    nodes = [{"name": "=x" + HOSTILE, "op_type": "Relu", "macs": 6}]
    assert HOSTILE in _csv(nodes)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    shown = _csv(nodes)
    assert "'=x" + ESCAPED in shown and not any(raw in shown for raw in RAW)


def test_rich_tables_escape_control_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal tables are rich tables: the same escaping, and markup in names is not interpreted."""
    from rich.console import Console

    from gsrewrite.cli._output import table

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    out = io.StringIO()
    Console(file=out, color_system=None, width=400).print(table("T" + HOSTILE, ["name"], [[HOSTILE + "[bold]x"]]))
    text = out.getvalue()
    assert ESCAPED + "[bold]x" in text and "T" + ESCAPED in text
    assert not any(raw in text for raw in RAW)


def test_log_lines_escape_control_characters(capsys: pytest.CaptureFixture[str]) -> None:
    from gsrewrite.cli._group import _configure_logging

    _configure_logging(1, 0)
    try:
        logging.getLogger("gsrewrite.test").warning("node %s failed", HOSTILE)
    finally:
        logging.getLogger("gsrewrite").handlers.clear()
    assert capsys.readouterr().err == f"WARNING: node {ESCAPED} failed\n"
