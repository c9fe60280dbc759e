"""Near-miss tracing for ``--explain``: the deepest partial match of each pattern and why it stopped."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx_graphsurgeon as gs

    from gsrewrite.engine.match import Match
    from gsrewrite.engine.matcher import CompiledVariant
    from gsrewrite.patterns.template import TNode


@dataclass
class NearMiss:
    """How far one attempt got: ``depth`` of ``size`` template nodes matched, then ``reason``."""

    pattern: str
    variant: str
    depth: int
    size: int
    anchor: str
    template_node: str
    graph_node: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        where = f" at template node {self.template_node!r}" if self.template_node else ""
        node = f" (graph node {self.graph_node!r})" if self.graph_node else ""
        return (f"matched {self.depth}/{self.size} nodes from anchor {self.anchor!r}{where}{node}: {self.reason}")


class Tracer:
    """Keeps, per pattern, the attempt that matched the most template nodes (first one on ties)."""

    def __init__(self) -> None:
        self.best: dict[str, NearMiss] = {}
        self.attempts: dict[str, int] = {}

    def attempt(self, pattern: str) -> None:
        self.attempts[pattern] = self.attempts.get(pattern, 0) + 1

    def record(self, cv: CompiledVariant, depth: int, anchor: gs.Node, tn: TNode | None, gn: gs.Node | None,
               reason: str) -> None:
        self.note(cv.pattern.name, cv.variant.label, len(cv.variant.template.nodes), depth, anchor, tn, gn, reason)

    def refused(self, match: Match, reason: str) -> None:
        """A complete match that passed its checks but that the engine refused (its replacement would make a
        cycle): it ranks above every other near miss of the pattern."""
        size = len(match.variant.template.nodes)
        self.best.pop(match.pattern.name, None)
        self.note(match.pattern.name, match.variant.label, size, size, match.anchor, None, None,
                  f"refused by the engine: {reason}")

    def note(self, name: str, variant: str, size: int, depth: int, anchor: gs.Node, tn: TNode | None,
             gn: gs.Node | None, reason: str) -> None:
        current = self.best.get(name)
        # a failure after a full structural match (boundary or check) ranks above any partial one
        score = depth + (1 if tn is None and depth == size else 0)
        if current is not None and score <= current.depth + (1 if not current.template_node else 0):
            return
        self.best[name] = NearMiss(
            pattern=name, variant=variant, depth=depth, size=size, anchor=anchor.name or anchor.op,
            template_node=tn.label if tn is not None else "", graph_node=(gn.name or gn.op) if gn else "",
            reason=reason,
        )
