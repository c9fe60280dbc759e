"""A third-party plugin as users install it: tests/plugin_pkgs/gsrewrite-testplugin, pip-installed next to the
gsrewrite wheel in a fresh venv; its hooks are reached through the plugin manager by the installed CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_wheel_cli import _ok, _run, wheel_venv

PACKAGE = Path(__file__).resolve().parent / "plugin_pkgs" / "gsrewrite-testplugin"


@pytest.fixture(scope="module")
def with_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a fresh venv with the gsrewrite wheel and the test plugin installed."""
    bin_dir = wheel_venv(tmp_path_factory.mktemp("plugin-venv"))
    _ok(_run(sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps", "--no-index",
             "--no-build-isolation", "--disable-pip-version-check", PACKAGE))
    return bin_dir


def _double_model(path: Path) -> Path:
    """x -> test.domain.Double -> d -> Relu -> y; ONNX inference cannot type d (nor y behind it)."""
    nodes = [helper.make_node("Double", ["x"], ["d"], domain="test.domain"), helper.make_node("Relu", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.domain", 1)])
    onnx.save(model, path)
    return path


def test_the_installed_plugin_is_listed_with_its_hook(with_plugin: Path, tmp_path: Path) -> None:
    listed = json.loads(_ok(_run(with_plugin / "gsrewrite", "plugins", "--json", cwd=tmp_path)).stdout)
    text = json.dumps(listed)
    assert "gsrewrite-testplugin" in text and "gsrewrite_infer_shape" in text


def test_its_shape_handler_types_a_custom_op_for_the_one_shape_entry_point(with_plugin: Path, tmp_path: Path):
    _double_model(tmp_path / "m.onnx")
    done = _run(with_plugin / "gsrewrite", "extract", "m.onnx", "--inputs", "x", "--outputs", "d", "-o", "s.onnx",
                "--no-validate", cwd=tmp_path)
    _ok(done)
    output = onnx.load(tmp_path / "s.onnx").graph.output[0]
    assert output.type.tensor_type.elem_type == TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["N", 4]
    disabled = _run(with_plugin / "gsrewrite", "--disable-plugin", "testplugin", "extract", "m.onnx", "--inputs", "x",
                    "--outputs", "d", "-o", "t.onnx", "--no-validate", cwd=tmp_path)
    assert disabled.returncode == 2 and "type of 'd' is unknown" in disabled.stderr



def test_its_pattern_and_check_are_registered_and_rewrite(with_plugin: Path, tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    listed = json.loads(_ok(_run(with_plugin / "gsrewrite", "patterns", "list", "--json", cwd=tmp_path)).stdout)
    mine = [p for p in listed if p["name"] == "testplugin-relu-relu"]
    assert mine and "gsrewrite-testplugin" in mine[0]["provider"]
    done = _ok(_run(with_plugin / "gsrewrite", "apply", "--pattern", "testplugin", "m.onnx", "o.onnx", "--json",
                    cwd=tmp_path))
    assert json.loads(done.stdout)["counts"] == {"testplugin-relu-relu": 1}
    assert [n.op_type for n in onnx.load(tmp_path / "o.onnx").graph.node] == ["Relu"]


def test_its_pass_is_listed_and_runs_when_asked(with_plugin: Path, tmp_path: Path) -> None:
    listed = _ok(_run(with_plugin / "gsrewrite", "passes", "list", cwd=tmp_path)).stdout
    assert "testplugin-count-relus" in listed and "gsrewrite-testplugin" in listed
    _double_model(tmp_path / "m.onnx")
    done = _run(with_plugin / "gsrewrite", "simplify", "m.onnx", "s.onnx", "--only", "testplugin-count-relus",
                "--no-validate", "--json", cwd=tmp_path)
    _ok(done)
    assert json.loads(done.stdout)["passes"] == ["testplugin-count-relus"]


def test_its_op_is_shaped_and_profiled_symbolically_by_the_installed_cli(with_plugin: Path, tmp_path: Path) -> None:
    _double_model(tmp_path / "m.onnx")
    shapes = json.loads(_ok(_run(with_plugin / "gsrewrite", "shapes", "m.onnx", "--all", "--json",
                                 cwd=tmp_path)).stdout)
    assert shapes["tensors"]["d"]["shape"] == ["N", 4] and shapes["outputs"]["y"] == ["N", 4]
    profile = json.loads(_ok(_run(with_plugin / "gsrewrite", "profile", "m.onnx", "--format", "json",
                                  cwd=tmp_path)).stdout)
    by_type = profile["by_op_type"]
    assert by_type["test.domain.Double"]["macs"] == "4*N" and by_type["Relu"]["macs"] == "4*N"
    assert profile["total"]["macs"] == "8*N" and profile["unprofiled"] == {}
    bound = json.loads(_ok(_run(with_plugin / "gsrewrite", "profile", "m.onnx", "--input-shape", "N=3", "--json",
                                cwd=tmp_path)).stdout)
    assert bound["total"]["macs"] == 24
    # without the plugin its op has no profiler and no shape: the CLI says what it could not count
    bare = json.loads(_ok(_run(with_plugin / "gsrewrite", "--disable-plugin", "testplugin", "profile", "m.onnx",
                               "--json", cwd=tmp_path)).stdout)
    assert bare["unprofiled"] == {"test.domain.Double": 1, "Relu": 1}  # nor the Relu behind it a shape


def test_its_compression_strategy_is_listed_validated_and_applied(with_plugin: Path, tmp_path: Path) -> None:
    rng = __import__("numpy").random.default_rng(0)
    weight = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], rng.standard_normal(64).tolist())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    listed = _ok(_run(with_plugin / "gsrewrite", "compress", "--list", cwd=tmp_path)).stdout
    assert "testplugin-round16" in listed and "int4" in listed
    done = json.loads(_ok(_run(with_plugin / "gsrewrite", "compress", "m.onnx", "r.onnx", "--strategy",
                               "testplugin-round16", "--bench-runs", "0", "--json", cwd=tmp_path)).stdout)
    assert done["ok"] and done["validated"] and done["outputs"][0]["cosine"] > 0.9999
    stored = onnx.numpy_helper.to_array(onnx.load(tmp_path / "r.onnx").graph.initializer[0])
    assert (stored.astype("float16").astype("float32") == stored).all()
