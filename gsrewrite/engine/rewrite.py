"""The pattern rewrite pass: every selected pattern, largest first, repeated to a fixed point.

One *sweep* indexes the graph's nodes by op type, tries every compiled variant (in priority order) at every
candidate anchor (in graph order), claims the nodes of each match so that matches never overlap, then
replaces all matches. Sweeps repeat until nothing matches (bounded), so a pattern may build on another's
output (SkipLayerNormalization on a fused LayerNormalization). The graph is cleaned up and sorted once, at
the end of the pass.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from gsrewrite.engine.acyclic import Positions
from gsrewrite.engine.dedupe import merge_added_duplicates
from gsrewrite.engine.match import CheckFailed, Match
from gsrewrite.engine.matcher import CompiledVariant, Matcher
from gsrewrite.engine.replace import ReplaceRefused, refusal, replace_match
from gsrewrite.engine.shape_reads import release_shape_reads
from gsrewrite.engine.targets import choose_replacement
from gsrewrite.engine.tracing import Tracer
from gsrewrite.graph.core import NameSource, cleanup, made_values, toposort
from gsrewrite.patterns.pattern import Pattern
from gsrewrite.protocols import PassResult as PassResult  # the one pass result (re-exported for the engine's users)
from gsrewrite.report.collect import Regions

log = logging.getLogger(__name__)

MAX_SWEEPS = 8


@dataclass
class MatchRecord:
    """One applied rewrite, as reported by ``--json``; ``region``: what was matched and what replaced it, as data
    (a :class:`~gsrewrite.report.record.Region`, shared by the rewrites of equal structure; ``--json`` gives its
    signature)."""

    pattern: str
    variant: str
    replaced: list[str]
    added: list[str]
    replaced_ops: list[str]
    added_ops: list[str]
    region: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "region"}
        return data | {"region": self.region.signature if self.region is not None else None}


class RewritePass:
    """Apply ``patterns`` for ``target``; ``functions`` holds the named checks and computations."""

    def __init__(self, patterns: list[Pattern], checks: dict[str, Any], computes: dict[str, Any],
                 target: str, *, explain: bool = False, max_sweeps: int = MAX_SWEEPS) -> None:
        self.patterns = patterns
        self.checks = checks
        self.computes = computes
        self.target = target
        self.explain = explain
        self.max_sweeps = max_sweeps
        #: pattern order -> its compiled variants (built the first time the pattern can match)
        self._compiled: dict[int, list[CompiledVariant]] = {}

    def run(self, graph: gs.Graph) -> PassResult:
        result = PassResult(graph, False)
        usable = self._compile(int(graph.opset), result.skipped)
        names = NameSource(graph)
        regions = Regions(graph)
        added: set[int] = set()
        for _sweep in range(self.max_sweeps):
            tracer = Tracer() if self.explain else None
            positions = Positions(graph)
            matches = self._find(graph, usable, tracer, positions)
            result.tracer = tracer
            if not matches:
                break
            added.update(self._replace(graph, matches, result, names, (regions, positions)))
        else:
            log.warning("rewrite did not reach a fixed point after %d sweeps", self.max_sweeps)
        if result.modified:
            toposort(cleanup(graph))
            if merge_added_duplicates(graph, added):
                cleanup(graph)
        return result

    def _compile(self, opset: int, skipped: dict[str, str]) -> list[tuple[int, Pattern, Any]]:
        """(order, pattern, replacement) of the patterns that have a replacement for the target and opset."""
        usable = []
        for order, pattern in enumerate(self.patterns):
            replacement, reason = choose_replacement(pattern, self.target, opset)
            if replacement is None:
                skipped[pattern.name] = reason
                log.info("pattern %s skipped: %s", pattern.name, reason)
                continue
            usable.append((order, pattern, replacement))
        return usable

    def _variants(self, usable: list[tuple[int, Pattern, Any]],
                  counts: Mapping[tuple[str, str], int]) -> list[CompiledVariant]:
        """The compiled variants of the patterns the graph has the ops for, largest (highest priority) first.
        A pattern's variants are expanded and compiled the first time its ops are all present."""
        entries = []
        for order, pattern, replacement in usable:
            if not all(counts.get(op, 0) >= n for op, n in pattern.required_ops.items()):
                continue
            compiled = self._compiled.get(order)
            if compiled is None:
                compiled = [CompiledVariant(pattern, v, replacement) for v in pattern.variants]
                self._compiled[order] = compiled
            for v_order, cv in enumerate(compiled):
                entries.append(((-pattern.variant_priority(cv.variant), order, v_order), cv))
        return [cv for _key, cv in sorted(entries, key=lambda e: e[0])]

    def _find(self, graph: gs.Graph, usable: list[tuple[int, Pattern, Any]],
              tracer: Tracer | None, positions: Positions) -> list[Match]:
        index: dict[tuple[str, str], list[gs.Node]] = {}
        for node in graph.nodes:
            index.setdefault((node.domain or "", node.op), []).append(node)
        counts = {op: len(nodes) for op, nodes in index.items()}
        compiled = self._variants(usable, counts)
        claimed: set[int] = set()
        matcher = Matcher(graph, claimed, self.checks, tracer)
        matches = []
        for cv in compiled:
            if not cv.possible_in(counts):  # the graph lacks some op the template needs
                continue
            for anchor in index.get(cv.anchor_op, ()):
                if id(anchor) in claimed or not cv.anchor_may_match(anchor):
                    continue
                if tracer is not None:
                    tracer.attempt(cv.pattern.name)
                match = matcher.match_at(cv, anchor)
                if match is None or not self._compute(match, cv, tracer):
                    continue
                reason = refusal(match, positions)  # asked again when it is replaced (after the sweep's others)
                if reason:
                    self._refuse(match, reason, tracer)
                    continue
                claimed.update(id(n) for n in match.nodes.values())
                matches.append(match)
        return matches

    def _compute(self, match: Match, cv: CompiledVariant, tracer: Tracer | None) -> bool:
        for value, function in match.pattern.compute.items():
            try:
                made = match.calling(function, self.computes[function])
                # a large array goes to the request's scratch file now: a sweep computes every match before it
                # replaces any, and the packed weights of all of them would be in memory at once (BERT-base: 42 MB)
                match.computed[value] = made_values(value, made) if isinstance(made, np.ndarray) else made
            except CheckFailed as exc:
                if tracer is not None:
                    size = len(cv.variant.template.nodes)
                    tracer.record(cv, size, match.anchor, None, None, f"compute {function}: {exc}")
                return False
        return True

    @staticmethod
    def _refuse(match: Match, reason: str, tracer: Tracer | None) -> None:
        log.info("pattern %s: match at %r refused: %s", match.pattern.name, match.anchor.name, reason)
        if tracer is not None:
            tracer.refused(match, reason)

    def _replace(self, graph: gs.Graph, matches: list[Match], result: PassResult, names: NameSource,
                 where: tuple[Regions, Positions]) -> set[int]:
        """Replace every match (taken down as a region first, for the report) that the replace primitive accepts;
        returns the ids of the nodes added."""
        regions, positions = where
        removed: set[int] = set()
        new: set[int] = set()
        for match in matches:
            # kept intermediates whose Shape readers can read a survivor instead
            release_shape_reads(match, names, positions)
            gone = match.removed_nodes()
            old = [(n.name, n.op) for n in gone]
            before = regions.before(gone)
            try:
                added = replace_match(graph, match, names, positions)
            except ReplaceRefused as exc:  # an earlier replacement of the sweep made a path from output to input
                self._refuse(match, str(exc), result.tracer)
                continue
            removed.update(id(n) for n in gone)
            new.update(id(n) for n in added)
            result.counts[match.pattern.name] += 1
            result.records.append(MatchRecord(
                match.pattern.name, match.variant.label, [n for n, _ in old], [n.name for n in added],
                [op for _, op in old], [n.op for n in added],
                regions.region(match.pattern.name, match.variant.label, before, added),
            ))
        graph.nodes = [n for n in graph.nodes if id(n) not in removed]
        result.modified = result.modified or bool(new)
        return new - removed
