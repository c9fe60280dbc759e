"""The rewrite engine: canonicalization, the generic matcher, the replace primitive and ``apply``."""

from __future__ import annotations

from gsrewrite.engine.apply import RewriteResult, apply
from gsrewrite.engine.match import CheckFailed, Match
from gsrewrite.engine.rewrite import MatchRecord, PassResult, RewritePass

__all__ = ["CheckFailed", "Match", "MatchRecord", "PassResult", "RewritePass", "RewriteResult", "apply"]
