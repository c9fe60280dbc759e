"""The rewrite engine: canonicalization, the generic matcher and the replace primitive.

``apply`` (load, rewrite, validate) is in :mod:`gsrewrite.pipelines`, above the engine.
"""

from __future__ import annotations

from gsrewrite.engine.match import CheckFailed, Match
from gsrewrite.engine.rewrite import MatchRecord, PassResult, RewritePass

__all__ = ["CheckFailed", "Match", "MatchRecord", "PassResult", "RewritePass"]
