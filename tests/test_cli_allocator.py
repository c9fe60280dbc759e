"""The CLI keeps freed large buffers in its process (glibc only); the opt-out skips it."""

from __future__ import annotations

import sys

import pytest

from gsrewrite.cli import _allocator


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tuning")
def test_thresholds_are_raised_unless_opted_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt  # noqa: B018 - glibc present?
    except (OSError, AttributeError):
        pytest.skip("not glibc")
    assert _allocator.keep_freed_buffers() is True
    monkeypatch.setenv("GSREWRITE_KEEP_MALLOC", "1")
    assert _allocator.keep_freed_buffers() is False


def test_the_cli_applies_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from gsrewrite.cli import _group, main

    calls: list[bool] = []
    monkeypatch.setattr(_group, "keep_freed_buffers", lambda: calls.append(True) or True)
    assert CliRunner().invoke(main, ["passes", "list", "--json"]).exit_code == 0
    assert calls == [True]
