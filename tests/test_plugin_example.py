"""The example third-party package (plugins/gsrewrite-example), installed for real and used end to end.

A virtual environment is made on top of the current one (``--system-site-packages``, plus a ``.pth`` file
that adds this interpreter's site folders, so it sees the editable gsrewrite install), the example is
``pip install``-ed into it without network, and that environment's ``gsrewrite`` runs as a subprocess.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper

import gsrewrite
from gsrewrite import plugin_hooks
from gsrewrite.plugin_manager import get_plugin_manager, reset_plugin_manager
from gsrewrite.protocols import OpCost

EXAMPLE = Path(__file__).resolve().parents[1] / "plugins" / "gsrewrite-example"
HOOKS = ["gsrewrite_cli_commands", "gsrewrite_infer_shape", "gsrewrite_profile_op"]


def _example_version() -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]["version"]


def _can_build_wheels() -> bool:
    """setuptools < 70.1 needs the ``wheel`` package to build without build isolation."""
    import setuptools

    major, minor = (int(part) for part in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _run(
    *args: str | Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    # a neutral working folder: `python -c` / `-m` put the cwd first on sys.path, and the repo root holds the
    # gsrewrite sources, which must not shadow the installed package
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=120,
                            cwd=tempfile.gettempdir())
    if check:
        assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _layer_on_current_env(python: Path) -> None:
    """Make the new environment see this interpreter's packages (the editable gsrewrite among them)."""
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
    parents = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in parents)
    (Path(purelib) / "_gsrewrite_parent_env.pth").write_text(lines)
    seen = _run(python, "-c", "import gsrewrite; print(gsrewrite.__file__)").stdout.strip()
    assert Path(seen) == Path(gsrewrite.__file__), f"the test venv imports gsrewrite from {seen}"


def _venv_with(root: Path, *packages: Path) -> Path:
    """A venv layered on this environment with ``packages`` pip-installed into it (offline)."""
    if not _can_build_wheels():
        pytest.skip("installing plugins offline needs the 'wheel' package (or setuptools >= 70.1)")
    _run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", root / "venv")
    python = root / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"
    _layer_on_current_env(python)
    for package in packages:
        source = shutil.copytree(package, root / package.name, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        _run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
             "--disable-pip-version-check", source)
    return python


@pytest.fixture(scope="session")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv_with(tmp_path_factory.mktemp("example-venv"), EXAMPLE)


BROKEN_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "gsrewrite-broken"
version = "0.0.1"

[project.entry-points.gsrewrite]
broken = "gsrewrite_broken"
"""


@pytest.fixture(scope="session")
def broken_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plus a throw-away plugin package whose import fails, both installed for real."""
    root = tmp_path_factory.mktemp("broken-venv")
    broken = root / "gsrewrite-broken"
    (broken / "gsrewrite_broken").mkdir(parents=True)
    (broken / "pyproject.toml").write_text(BROKEN_PYPROJECT)
    (broken / "gsrewrite_broken" / "__init__.py").write_text("raise RuntimeError('this plugin is broken')\n")
    return _venv_with(root / "env", EXAMPLE, broken)


def gsrewrite_in(python: Path, *args: str | Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GSREWRITE_")}
    return _run(python, "-m", "gsrewrite", *args, env=clean | env, check=False)


def my_relu_model(path: Path) -> Path:
    """X[2,3] -> MyRelu -> Relu -> MyRelu -> Y (MyRelu in the example.com domain), shapes all known."""
    nodes = [
        helper.make_node("MyRelu", ["x"], ["a"], domain="example.com"),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("MyRelu", ["b"], ["y"], domain="example.com"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        value_info=[helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("example.com", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=10), path)
    return path


# --- installed for real -----------------------------------------------------------------------------
def test_the_installed_example_is_discovered_with_version_and_hooks(venv_python: Path) -> None:
    result = gsrewrite_in(venv_python, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    example = plugins["example"]
    assert (example["distribution"], example["version"], example["status"]) == (
        "gsrewrite-example",
        _example_version(),
        "ok",
    )
    assert example["hooks"] == HOOKS and example["commands"] == ["example-hello"]
    assert plugins["builtin:profilers.linear"]["status"] == "ok"


def test_the_example_command_counts_my_relu_nodes(venv_python: Path, tmp_path: Path) -> None:
    model = my_relu_model(tmp_path / "m.onnx")
    result = gsrewrite_in(venv_python, "example-hello", model)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"2 MyRelu node(s) in {model}, 96 bytes touched\n"


def test_the_example_command_reports_a_missing_model_in_one_line(venv_python: Path, tmp_path: Path) -> None:
    result = gsrewrite_in(venv_python, "example-hello", tmp_path / "nope.onnx")
    assert result.returncode == 2
    assert result.stderr == f"error: model file '{tmp_path / 'nope.onnx'}' does not exist\n"


def test_the_example_can_be_disabled(venv_python: Path) -> None:
    for env in ({"GSREWRITE_DISABLE_PLUGINS": "example"}, {"GSREWRITE_DISABLE_PLUGIN_AUTOLOAD": "1"}):
        result = gsrewrite_in(venv_python, "plugins", "--json", **env)
        example = next(p for p in json.loads(result.stdout)["plugins"] if p["name"] == "example")
        assert example["status"] == "disabled", env
        assert gsrewrite_in(venv_python, "example-hello", "m.onnx", **env).returncode == 2


def test_an_installed_broken_plugin_is_named_and_isolated(broken_venv: Path, tmp_path: Path) -> None:
    listing = gsrewrite_in(broken_venv, "plugins", "--json")
    assert listing.returncode == 0, listing.stderr
    plugins = {p["name"]: p for p in json.loads(listing.stdout)["plugins"]}
    assert plugins["broken"]["status"] == "failed" and "this plugin is broken" in plugins["broken"]["error"]
    assert plugins["broken"]["distribution"] == "gsrewrite-broken"
    model = my_relu_model(tmp_path / "m.onnx")
    info = gsrewrite_in(broken_venv, "info", model, "--json")  # an unrelated command keeps working
    assert info.returncode == 0 and json.loads(info.stdout)["node_count"] == 3
    listing = gsrewrite_in(broken_venv, "patterns", "list", "--json")  # one that loads every plugin, too
    assert listing.returncode == 0 and json.loads(listing.stdout)
    assert "plugin 'broken'" in listing.stderr and "Traceback" not in listing.stderr
    assert gsrewrite_in(broken_venv, "example-hello", model).returncode == 0  # and so does the other plugin


# --- the hooks, in process --------------------------------------------------------------------------
@pytest.fixture
def example_registered(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("GSREWRITE_DISABLE_PLUGIN_AUTOLOAD", "1")  # an installed copy must not interfere
    reset_plugin_manager()
    from gsrewrite_example import plugin

    get_plugin_manager().register(plugin, name="example")
    yield
    reset_plugin_manager()


def _my_relu(shape, dtype=np.float32) -> gs.Node:
    x, y = gs.Variable("x", dtype, shape), gs.Variable("y")
    return gs.Node("MyRelu", name="r", inputs=[x], outputs=[y], domain="example.com")


@pytest.mark.usefixtures("example_registered")
def test_example_hooks_answer_for_my_relu_only() -> None:
    assert plugin_hooks.infer_shape(_my_relu([4, "n"]), None) == [(np.float32, [4, "n"])]
    assert plugin_hooks.profile_op(_my_relu([4, 5], np.float16), None) == OpCost(0, 0, 2 * 20 * 2)
    assert plugin_hooks.profile_op(_my_relu([4, "n"]), None) == OpCost(0, 0, None)
    other = gs.Node("MyRelu", inputs=[gs.Variable("x", np.float32, [1])], outputs=[gs.Variable("y")])
    assert plugin_hooks.infer_shape(other, None) is None and plugin_hooks.profile_op(other, None) is None
    assert [c.name for c in plugin_hooks.plugin_cli_commands("example")] == ["example-hello"]
