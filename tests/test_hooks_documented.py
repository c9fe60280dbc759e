"""Every hook in gsrewrite/hookspecs.py is documented in docs/plugins.md and has a facade function.

That every hook is also *called* — through the plugin manager, from library code, by some test — is checked
at the end of a whole-suite run by tests/conftest.py, which records every hook call during the session. The
hooks that have no caller in the library yet are listed in NO_LIBRARY_CALLER below, with the reason: the
session check fails when one of them gets a caller, so the list can only shrink.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from gsrewrite import hookspecs, plugin_hooks

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "plugins.md").read_text()
SPEC_MARKER = f"{hookspecs.PROJECT_NAME}_spec"
HOOKS = sorted(
    name for name, fn in vars(hookspecs).items() if inspect.isfunction(fn) and hasattr(fn, SPEC_MARKER)
)
#: hooks that no library code calls yet (hook -> why, with the issue that gives it a caller). Read as data by
#: tests/conftest.py: keep it a literal dict.
NO_LIBRARY_CALLER = {
}
#: facade function per hook, when its name is not the hook name without the prefix.
FACADE = {"gsrewrite_cli_commands": "collect_cli_commands"}


def test_the_hook_list_is_not_empty() -> None:
    assert "gsrewrite_profile_op" in HOOKS and len(HOOKS) >= 6


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_documented_with_its_signature(hook: str) -> None:
    assert re.search(rf"^### {hook}$", DOC, re.MULTILINE), f"docs/plugins.md has no '### {hook}' section"
    args = ", ".join(inspect.signature(getattr(hookspecs, hook)).parameters)
    assert f"`{hook}({args})`" in DOC, f"docs/plugins.md does not show `{hook}({args})`"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_typed_facade_function(hook: str) -> None:
    facade = getattr(plugin_hooks, FACADE.get(hook, hook.removeprefix("gsrewrite_")), None)
    assert callable(facade), f"gsrewrite.plugin_hooks has no function for {hook}"
    assert inspect.getdoc(facade)


def test_the_allow_list_names_real_hooks_with_an_issue() -> None:
    for hook, reason in NO_LIBRARY_CALLER.items():
        assert hook in HOOKS, f"NO_LIBRARY_CALLER names {hook!r}, which is not a hook"
        assert re.search(r"\bissue \d+\b", reason), f"the reason for {hook} names no issue: {reason!r}"


def test_hooks_without_a_library_caller_say_so_in_the_docs() -> None:
    """Each uncalled hook's section says so; and no section claims a hook that has a caller is uncalled."""
    for hook in HOOKS:
        section = DOC.split(f"### {hook}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        uncalled = "no caller in gsrewrite yet" in section.lower()
        assert uncalled == (hook in NO_LIBRARY_CALLER), f"docs/plugins.md is wrong about whether {hook} is called"


def test_the_session_check_reads_this_allow_list(pytestconfig: pytest.Config) -> None:
    """The session-end check (tests/conftest.py) is active and reads NO_LIBRARY_CALLER from this file."""
    checks = pytestconfig.pluginmanager.get_plugin("gsrewrite-meta-checks")
    assert checks is not None
    conftest = type(checks)
    assert conftest.no_library_caller_allowlist(Path(__file__)) == NO_LIBRARY_CALLER
    assert conftest.hook_problems(["gsrewrite_x"], {"gsrewrite_x": {"test"}}, {}) == [
        "gsrewrite_x is never called through the plugin manager from library code (test)"]
    assert conftest.hook_problems(["gsrewrite_x"], {"gsrewrite_x": {"library"}}, {"gsrewrite_x": "issue 1"})
    assert not conftest.hook_problems(["gsrewrite_x"], {"gsrewrite_x": {"library", "test"}}, {})


def test_a_facade_call_from_library_code_is_recorded(pytestconfig: pytest.Config) -> None:
    from gsrewrite.patterns import default_registry

    recorder = pytestconfig.pluginmanager.get_plugin("gsrewrite-meta-checks").recorder
    recorder.hooks.pop("gsrewrite_register_patterns", None)
    default_registry()  # library code (gsrewrite.patterns) calls the hook through the facade
    assert "library" in recorder.hooks["gsrewrite_register_patterns"]
