"""skip-layernorm: the residual operands SkipLayerNormalization (or Sum + LayerNormalization) can take."""

from __future__ import annotations

from collections.abc import Callable

from gsrewrite.plugin_api import Match, reads


@reads("a", "b", "gamma")
def skip_operands(match: Match) -> str | None:
    """SkipLayerNormalization needs two 3-D operands of the same shape and a 1-D gamma."""
    a, b = match.shape("a"), match.shape("b")
    if a is None or b is None:
        return "the shapes of the residual operands are unknown"
    if len(a) != 3 or a != b:
        return f"the residual operands have shapes {a} and {b}, not the same 3-D shape"
    gamma = match.constant("gamma")
    if gamma is None or gamma.ndim != 1:
        return "gamma is not a 1-D constant"
    return None


CHECKS: dict[str, Callable[[Match], str | None]] = {
    "skip_operands": skip_operands,
}
