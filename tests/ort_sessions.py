"""A test helper: count the onnxruntime sessions a call creates and the runs it makes (a real session each)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class SessionLog:
    created: list[tuple[Any, ...]] = field(default_factory=list)
    ran: list[tuple[Any, ...]] = field(default_factory=list)


def count_sessions(monkeypatch: pytest.MonkeyPatch) -> SessionLog:
    """Replace ``onnxruntime.InferenceSession`` by a subclass that logs creations and runs."""
    import onnxruntime

    log = SessionLog()
    real = onnxruntime.InferenceSession

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            log.created.append(args)
            super().__init__(*args, **kwargs)

        def run(self, *args: Any, **kwargs: Any) -> Any:
            log.ran.append(args)
            return super().run(*args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", Counting)
    return log
