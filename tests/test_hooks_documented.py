"""Every hook in gsrewrite/hookspecs.py is documented in docs/plugins.md, has a facade function, is tested."""

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


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_exercised_by_a_test(hook: str) -> None:
    this = Path(__file__).resolve()
    users = [p for p in (ROOT / "tests").rglob("*.py") if p.resolve() != this and hook in p.read_text()]
    assert users, f"no test mentions {hook}"
