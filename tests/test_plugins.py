"""The plugin manager, the hook facade, the registries and ``gsrewrite plugins``, in process.

Third-party plugins are fake distributions written to a temporary folder on ``sys.path``: a
``<name>-<version>.dist-info`` with ``METADATA`` and ``entry_points.txt``, next to the plugin module, which
is exactly what importlib.metadata discovers for an installed package.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx_graphsurgeon as gs
import pytest
from click.testing import CliRunner

from gsrewrite import plugin_hooks
from gsrewrite.cli import main
from gsrewrite.errors import DuplicateNameError, PluginError, UsageError
from gsrewrite.plugin_manager import (
    get_plugin_manager,
    plugin_record,
    plugin_records,
    reset_plugin_manager,
    set_disabled,
)
from gsrewrite.protocols import CompressionStrategy, GraphPass, OpCost, OpProfiler, Tolerance
from gsrewrite.registry import NamedRegistry
from gsrewrite.shapes.symdim import sym

HOOKIMPL = "from gsrewrite.hookspecs import hookimpl\n"
GOOD = """
import click
from gsrewrite.hookspecs import hookimpl
from gsrewrite.protocols import OpCost

@hookimpl
def gsrewrite_profile_op(node, context):
    return OpCost(macs=7) if node.op == "FakeOp" else None

@hookimpl
def gsrewrite_infer_shape(node, context):
    return [("float32", [1])] if node.op == "FakeOp" else None

@hookimpl
def gsrewrite_register_passes(registry):
    registry.add(object(), name="fake-pass")

@click.command("fake-hello")
def hello():
    click.echo("hello from fake")

@hookimpl
def gsrewrite_cli_commands():
    return [hello]
"""


class FakeSite:
    """A folder on sys.path holding fake installed distributions (one module + one entry point each)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add(self, name: str, source: str, dist: str | None = None, version: str = "1.0") -> None:
        dist = dist or f"{name}-pkg"
        module = f"gsr_fake_{name}"
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[gsrewrite]\n{name} = {module}\n")
        (self.root / f"{module}.py").write_text(textwrap.dedent(source))
        self.modules.append(module)


@pytest.fixture(autouse=True)
def clean_plugin_state(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("GSREWRITE_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("GSREWRITE_DISABLE_PLUGINS", raising=False)
    logger = logging.getLogger("gsrewrite")
    saved = (logger.handlers[:], logger.propagate, logger.level)
    logger.handlers[:], logger.propagate = [], True
    reset_plugin_manager()
    yield
    reset_plugin_manager()
    logger.handlers[:], logger.propagate, logger.level = saved


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake = FakeSite(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield fake
    for module in fake.modules:
        sys.modules.pop(module, None)


def cli(*args: str):
    reset_plugin_manager()  # one process per real invocation: the plugin manager starts afresh
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def listed(*args: str) -> dict[str, dict]:
    result = cli(*args, "plugins", "--json")
    assert result.exit_code == 0, result.output
    return {p["name"]: p for p in json.loads(result.stdout)["plugins"]}


def node(op: str, *inputs: gs.Tensor, out_shape=None, domain: str | None = None, **attrs) -> gs.Node:
    out = gs.Variable("y", np.float32, out_shape)
    return gs.Node(op, name=f"{op.lower()}0", inputs=list(inputs), outputs=[out], attrs=attrs, domain=domain)


def var(name: str, shape) -> gs.Variable:
    return gs.Variable(name, np.float32, shape)


def const(name: str, shape) -> gs.Constant:
    return gs.Constant(name, np.zeros(shape, np.float32))


# --- built-ins --------------------------------------------------------------------------------------
def test_builtins_are_registered_even_with_autoload_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GSREWRITE_DISABLE_PLUGIN_AUTOLOAD", "1")
    record = plugin_record("builtin:profilers.linear")
    assert (record.status, record.distribution, record.builtin) == ("ok", "gsrewrite", True)
    assert "gsrewrite_profile_op" in record.hooks
    assert get_plugin_manager().get_plugin("builtin:profilers.linear") is not None


@pytest.mark.parametrize(
    ("n", "macs", "params"),
    [
        (node("MatMul", var("a", [2, 3, 4]), const("b", (4, 5))), 2 * 3 * 5 * 4, 20),
        (node("MatMul", var("a", [4]), var("b", [7, 4, 5])), 7 * 5 * 4, 0),
        # the bias add counts one per output element (MatMul + Add and their Gemm count the same)
        (node("Gemm", var("a", [3, 4]), const("b", (5, 4)), const("c", (5,)), transB=1), 3 * 5 * 4 + 3 * 5, 25),
        (node("Conv", var("x", [1, 3, 8, 8]), const("w", (6, 3, 3, 3)), pads=[1, 1, 1, 1]), 6 * 64 * 27, 162),
        (
            node("Conv", var("x", [1, 4, 9, 9]), const("w", (4, 2, 3, 3)), strides=[2, 2], group=2),
            4 * 16 * 18,
            72,
        ),
        (
            node("Conv", var("x", [1, 3, 8, 8]), const("w", (6, 3, 1, 1)), auto_pad="SAME_UPPER"),
            6 * 64 * 3,
            18,
        ),
        # symbolic dims give MACs as an expression in them
        (node("MatMul", var("a", ["batch", 4]), const("b", (4, 5))), 20 * sym("batch"), 20),
        (node("MatMul", var("a", [None, 4]), const("b", (4, 5))), None, 20),
    ],
)
def test_builtin_profilers_count_macs_through_the_hook(n: gs.Node, macs: int | None, params: int) -> None:
    assert plugin_hooks.profile_op(n, None) == OpCost(macs=macs, params=params)


def test_builtin_profilers_leave_other_ops_and_domains_alone() -> None:
    assert plugin_hooks.profile_op(node("NoSuchOp", var("x", [2])), None) is None
    assert (
        plugin_hooks.profile_op(node("MatMul", var("a", [2, 2]), var("b", [2, 2]), domain="x.y"), None)
        is None
    )


# --- discovery and listing --------------------------------------------------------------------------
def test_a_distribution_is_discovered_by_entry_point_and_used(site: FakeSite) -> None:
    site.add("fake", GOOD, dist="fake-plugin", version="1.0")
    fake = listed()["fake"]
    assert (fake["status"], fake["distribution"], fake["version"], fake["builtin"]) == (
        "ok",
        "fake-plugin",
        "1.0",
        False,
    )
    assert fake["hooks"] == [
        "gsrewrite_cli_commands",
        "gsrewrite_infer_shape",
        "gsrewrite_profile_op",
        "gsrewrite_register_passes",
    ]
    assert fake["commands"] == ["fake-hello"]
    assert cli("fake-hello").output == "hello from fake\n"
    reset_plugin_manager()
    assert plugin_hooks.profile_op(node("FakeOp", var("x", [1])), None) == OpCost(macs=7)
    assert plugin_hooks.infer_shape(node("FakeOp", var("x", [1])), None) == [("float32", [1])]
    passes: NamedRegistry[GraphPass] = NamedRegistry("pass")
    plugin_hooks.register_passes(passes)
    assert passes.provider("fake-pass") == "plugin 'fake' (fake-plugin 1.0)"


def test_plugins_table_shows_status_and_reason(site: FakeSite) -> None:
    site.add("broken", "import missing_dependency_xyz\n")
    result = cli("plugins")
    assert result.exit_code == 0
    assert "builtin:profilers.linear" in result.stdout
    assert "broken: failed: ModuleNotFoundError: No module named 'missing_dependency_xyz'\n" in result.stdout


def test_a_plugin_that_fails_to_import_is_named_and_skipped(site: FakeSite) -> None:
    site.add("broken", "import missing_dependency_xyz\n", dist="broken-pkg", version="0.3")
    site.add("fake", GOOD)
    plugins = listed()
    assert plugins["broken"]["status"] == "failed"
    assert plugins["broken"]["error"] == "ModuleNotFoundError: No module named 'missing_dependency_xyz'"
    assert plugins["fake"]["status"] == "ok"
    result = cli("plugins")
    assert result.exit_code == 0
    assert "WARNING: plugin 'broken' (broken-pkg 0.3) failed to load and is skipped" in result.stderr
    result = cli("--help")
    assert result.exit_code == 0 and "fake-hello" in result.stdout


def test_a_plugin_that_exits_at_import_does_not_take_gsrewrite_down(site: FakeSite) -> None:
    site.add("quitter", "raise SystemExit(4)\n")
    assert listed()["quitter"]["error"] == "SystemExit: 4"


def test_an_exception_inside_a_hook_names_plugin_and_hook(site: FakeSite) -> None:
    site.add(
        "raiser",
        """
        from gsrewrite.hookspecs import hookimpl

        @hookimpl
        def gsrewrite_register_compression_strategies(registry):
            raise ValueError("boom")

        @hookimpl
        def gsrewrite_profile_op(node, context):
            raise KeyError("shape")
    """,
        dist="raiser-pkg",
        version="2.0",
    )
    with pytest.raises(PluginError) as info:
        plugin_hooks.register_compression_strategies(NamedRegistry("compression strategy"))
    expected = (
        "plugin 'raiser' (raiser-pkg 2.0) failed in gsrewrite_register_compression_strategies: "
        "ValueError: boom"
    )
    assert str(info.value) == expected
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(
        PluginError, match=r"plugin 'raiser' .* gsrewrite_profile_op for node 'matmul0' \(MatMul\)"
    ):
        plugin_hooks.profile_op(node("MatMul", var("a", [2, 2]), var("b", [2, 2])), None)


def test_a_command_hook_that_raises_leaves_the_cli_working(
    site: FakeSite, caplog: pytest.LogCaptureFixture
) -> None:
    site.add(
        "badcli",
        """
        from gsrewrite.hookspecs import hookimpl

        @hookimpl
        def gsrewrite_cli_commands():
            raise RuntimeError("no commands today")
    """,
    )
    result = cli("--help")
    assert result.exit_code == 0 and "plugins" in result.stdout
    assert "plugin 'badcli' (badcli-pkg 1.0) failed in gsrewrite_cli_commands: RuntimeError" in caplog.text
    badcli = listed()["badcli"]
    assert badcli["status"] == "failed" and "no commands today" in badcli["error"]


def test_an_unknown_hook_fails_that_plugin_only(site: FakeSite) -> None:
    site.add(
        "typo",
        """
        from gsrewrite.hookspecs import hookimpl

        @hookimpl
        def gsrewrite_profile_ops(node, context):
            return None

        @hookimpl
        def gsrewrite_infer_shape(node, context):
            return ["should never be called"]
    """,
    )
    site.add("fake", GOOD)
    plugins = listed()
    assert plugins["typo"]["status"] == "failed"
    assert (
        plugins["typo"]["error"]
        == "PluginValidationError: unknown hook 'gsrewrite_profile_ops' (not in gsrewrite)"
    )
    assert plugins["fake"]["status"] == "ok"
    reset_plugin_manager()
    assert get_plugin_manager().get_plugin("typo") is None
    assert plugin_hooks.infer_shape(node("Relu", var("x", [1])), None) is None


@pytest.mark.parametrize(
    ("source", "error"),
    [
        (
            HOOKIMPL + "@hookimpl\ndef gsrewrite_profile_op(node, ctx):\n    pass\n",
            "Argument(s) {'ctx'} are declared in the hookimpl but can not be found in the hookspec",
        ),
        (
            HOOKIMPL + "@hookimpl(wrapper=True)\ndef gsrewrite_profile_op(node):\n    return (yield)\n",
            "hook wrappers are not supported (gsrewrite_profile_op)",
        ),
    ],
)
def test_invalid_hook_implementations_fail_that_plugin(site: FakeSite, source: str, error: str) -> None:
    site.add("invalid", source)
    record = listed()["invalid"]
    assert record["status"] == "failed" and error in record["error"]


def test_undecorated_hook_functions_are_used(site: FakeSite) -> None:
    site.add("plain", "def gsrewrite_profile_op(node, context):\n    return 'plain'\n")
    assert plugin_hooks.profile_op(node("Relu", var("x", [1])), None) == "plain"


# --- disabling --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "loaded"), [("1", False), ("true", False), ("0", True), ("", True)])
def test_autoload_env_var(site: FakeSite, monkeypatch: pytest.MonkeyPatch, value: str, loaded: bool) -> None:
    site.add("fake", GOOD)
    monkeypatch.setenv("GSREWRITE_DISABLE_PLUGIN_AUTOLOAD", value)
    plugins = listed()
    assert (plugins["fake"]["status"] == "ok") is loaded
    assert plugins["builtin:profilers.linear"]["status"] == "ok"
    assert ("fake-hello" in cli("--help").stdout) is loaded


def test_disable_one_plugin_by_flag_or_env(site: FakeSite, monkeypatch: pytest.MonkeyPatch) -> None:
    site.add("fake", GOOD)
    site.add("other", "def gsrewrite_profile_op(node, context):\n    return None\n")
    plugins = listed("--disable-plugin", "fake")
    assert plugins["fake"]["status"] == "disabled" and plugins["other"]["status"] == "ok"
    monkeypatch.setenv("GSREWRITE_DISABLE_PLUGINS", "other, builtin:profilers.linear")
    plugins = listed()
    assert [plugins[n]["status"] for n in ("fake", "other", "builtin:profilers.linear")] == [
        "ok",
        "disabled",
        "disabled",
    ]
    monkeypatch.setenv("GSREWRITE_DISABLE_PLUGINS", "fake")
    result = cli("fake-hello")
    assert result.exit_code == 2 and "No such command 'fake-hello'" in result.output


def test_disable_flag_hides_the_plugin_commands(site: FakeSite) -> None:
    site.add("fake", GOOD)
    result = cli("--disable-plugin", "fake", "fake-hello")
    assert result.exit_code == 2 and "No such command 'fake-hello'" in result.output


def test_disabling_an_unknown_plugin_warns(caplog: pytest.LogCaptureFixture) -> None:
    set_disabled(["no-such-plugin"])
    with caplog.at_level(logging.WARNING, logger="gsrewrite"):
        plugin_records()
    assert "cannot disable plugin 'no-such-plugin': no such plugin" in caplog.text


# --- CLI command clashes ----------------------------------------------------------------------------
def test_a_command_name_clash_leaves_that_plugin_out(site: FakeSite, caplog: pytest.LogCaptureFixture) -> None:
    """A plugin reusing a built-in command's name (or another plugin's) is named and left out with all its
    commands; the built-in command and the other plugins' commands stay."""
    site.add("fake", GOOD)
    site.add(
        "zclash",
        """
        import click

        def gsrewrite_cli_commands():
            return [click.Command("plugins"), click.Command("zclash-own")]
    """,
    )
    result = cli("--help")
    assert result.exit_code == 0
    assert "plugins" in result.stdout and "fake-hello" in result.stdout and "zclash-own" not in result.stdout
    assert ("plugin 'zclash' (zclash-pkg 1.0) adds command 'plugins', already provided by plugin 'builtin:cli' "
            "(gsrewrite 0.1.0); its commands are left out") in caplog.text
    assert cli("fake-hello").stdout == "hello from fake\n"
    assert cli("plugins", "--json").exit_code == 0  # the built-in one, not the plugin's empty command


def test_built_in_commands_come_through_the_hook_like_a_plugins(site: FakeSite) -> None:
    """Disabling the CLI's own plugin leaves a plugin's commands only: the built-ins have no other way in."""
    site.add("fake", GOOD)
    assert "optimize" in cli("--help").stdout
    listed_cli = listed()["builtin:cli"]
    assert listed_cli["builtin"] and "optimize" in listed_cli["commands"] and "plugins" in listed_cli["commands"]
    result = cli("--disable-plugin", "builtin:cli", "optimize", "m.onnx")
    assert result.exit_code == 2 and "No such command 'optimize'" in result.output
    assert cli("--disable-plugin", "builtin:cli", "fake-hello").stdout == "hello from fake\n"


# --- registries -------------------------------------------------------------------------------------
class Fp16:
    name = "fp16"
    description = "weights to float16"
    tolerance = Tolerance(min_cosine=0.9999)

    def apply(self, model, **options):
        return model


def test_named_registry_basics() -> None:
    registry: NamedRegistry[CompressionStrategy] = NamedRegistry("compression strategy")
    strategy = registry.add(Fp16())
    registry.add(Fp16(), name="half")
    assert registry.get("fp16") is strategy
    assert registry.names() == ["fp16", "half"] and len(registry) == 2 and "half" in registry
    assert [name for name, _ in registry.items()] == ["fp16", "half"]
    with pytest.raises(UsageError, match=r"unknown compression strategy 'int4'; known: fp16, half"):
        registry.get("int4")
    with pytest.raises(UsageError, match="has no name"):
        registry.add(object())


def test_duplicate_names_raise_naming_both_providers(site: FakeSite) -> None:
    registry: NamedRegistry[CompressionStrategy] = NamedRegistry("compression strategy")
    with registry.providing("plugin 'a'"):
        registry.add(Fp16())
    with registry.providing("plugin 'b'"), pytest.raises(DuplicateNameError) as info:
        registry.add(Fp16())
    assert str(info.value) == "compression strategy 'fp16' is provided by both plugin 'a' and plugin 'b'"
    site.add("fake", GOOD)
    site.add(
        "twin", "def gsrewrite_register_passes(registry):\n    registry.add(object(), name='fake-pass')\n"
    )
    with pytest.raises(
        PluginError,
        match=r"plugin 'twin' .* failed in gsrewrite_register_passes: DuplicateNameError: "
        r"pass 'fake-pass' is provided by both plugin 'fake' .* and plugin 'twin'",
    ):
        plugin_hooks.register_passes(NamedRegistry("pass"))


def test_pattern_registration_hook_reaches_every_plugin(site: FakeSite) -> None:
    from gsrewrite.patterns import PatternRegistry

    site.add("pat", "def gsrewrite_register_patterns(registry):\n    registry.add_check('pat-ok', len)\n")
    registry = PatternRegistry()
    plugin_hooks.register_patterns(registry)
    assert registry.checks["pat-ok"] is len
    assert registry.provider("check:pat-ok") == "plugin 'pat' (pat-pkg 1.0)"


# --- dispatch order and protocols -------------------------------------------------------------------
def test_dispatch_asks_the_last_registered_first_and_skips_none() -> None:
    class Answer:
        def __init__(self, value):
            self.value = value

        def gsrewrite_profile_op(self, node, context):
            return self.value

    pm = get_plugin_manager()
    pm.register(Answer("first"), name="first")
    pm.register(Answer("second"), name="second")
    pm.register(Answer(None), name="abstains")
    assert plugin_hooks.profile_op(node("Relu", var("x", [1])), None) == "second"
    direct = {r.name: r for r in plugin_records() if not r.builtin}
    assert (
        direct["abstains"].hooks == ("gsrewrite_profile_op",)
        and direct["abstains"].label == "plugin 'abstains'"
    )


def test_protocols_describe_plugin_objects() -> None:
    class Fold:
        name, description = "fold", "constant folding"

        def run(self, graph):
            return graph

    assert isinstance(Fp16(), CompressionStrategy) and not isinstance(Fp16(), GraphPass)
    assert isinstance(Fold(), GraphPass)
    from gsrewrite_builtins.profilers.linear import PROFILERS

    assert all(isinstance(profiler, OpProfiler) for profiler in PROFILERS.values())


def test_a_plugin_overrides_a_builtin_profiler(site: FakeSite) -> None:
    """A plugin registered after the built-ins is asked first: its MatMul cost wins, the others stay built-in."""
    site.add("mm", HOOKIMPL + textwrap.dedent("""
        from gsrewrite.plugin_api import OpCost

        @hookimpl
        def gsrewrite_profile_op(node, context):
            return OpCost(macs=42) if node.op == "MatMul" else None
    """))
    reset_plugin_manager()
    from onnx import TensorProto, helper

    import gsrewrite

    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.5] * 16)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    profile = gsrewrite.profile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    by_type = profile.by_op_type()
    assert by_type["MatMul"].macs == 42 and by_type["Relu"].macs == 12
    reset_plugin_manager()
