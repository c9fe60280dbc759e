"""Matcher scaling: time per node on synthetic graphs of ~1k, 10k and 100k nodes with planted patterns.

Each graph (see _synth.py) plants one decomposed LayerNorm and one erf-GELU per 50 nodes. For every size the
benchmark times, best of ``--repeat`` runs:

* ``import``      to_graph: ONNX shape inference + onnx-graphsurgeon import;
* ``canonicalize`` the canonicalization pass;
* ``find``        the matcher alone (every sweep's search, all registered patterns);
* ``pass``        the whole rewrite pass (find + replace + cleanup/toposort) -- canonicalize excluded;
* ``canon+pass``  canonicalize + pass -- canonicalize included;
* ``apply``       ``gsrewrite.pipelines.apply(model, ["all"], validate=False)`` end to end, model in, model out;
* ``apply, gc off`` the same with Python's cyclic garbage collector disabled (its share grows with the heap);

and checks that exactly the planted LayerNorms and GELUs were fused. The target (issue 3): time(100k)/time(10k)
<= 12 for find, pass and apply (near-linear); ratios of other size pairs are shown without a verdict.
Writes benchmarks/results/matcher_scaling.md.

    python benchmarks/matcher_scaling.py            # 1k, 10k, 100k
    python benchmarks/matcher_scaling.py --quick    # 1k, 10k, one run each
    python benchmarks/matcher_scaling.py --profile 100000
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import _markdown as md
import _synth
from _timing import best_of, profile, timed

HERE = Path(__file__).resolve().parent
RATIO_BOUND = 12.0
TARGET_SIZES = (10000, 100000)
JUDGED = ("find", "pass", "apply")
STAGES = ["import", "canonicalize", "find", "pass", "canon+pass", "apply", "apply, gc off"]
NORM_OPS = {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
            "SkipSimplifiedLayerNormalization", "RMSNormalization"}
GELU_OPS = {"Gelu", "FastGelu", "BiasGelu", "QuickGelu"}


@dataclass
class SizeResult:
    """Timings for one graph size (seconds per stage) and the per-pattern counts."""

    nodes: int
    planted: int
    times: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def _timed_pass_class():
    from gsrewrite.engine.rewrite import RewritePass

    class TimedPass(RewritePass):
        """The engine's pass, with the time spent in its matcher (``_find``) added up."""

        find_seconds = 0.0

        def _find(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            found = super()._find(*args, **kwargs)
            self.find_seconds += time.perf_counter() - start
            return found

    return TimedPass if hasattr(RewritePass, "_find") else RewritePass


def _stages(model, registry) -> tuple[dict[str, float], collections.Counter]:  # type: ignore[no-untyped-def]
    from gsrewrite.engine.canonicalize import canonicalize
    from gsrewrite.graph.conversion import to_graph

    patterns = registry.select(["all"])
    pass_class = _timed_pass_class()
    t_import, graph = timed(lambda: to_graph(model))
    t_canon, graph = timed(lambda: canonicalize(graph))
    rewrite = pass_class(patterns, registry.checks, registry.computes, "ort")
    t_pass, result = timed(lambda: rewrite.run(graph))
    find = getattr(rewrite, "find_seconds", float("nan"))
    times = {"import": t_import, "canonicalize": t_canon, "find": find, "pass": t_pass,
             "canon+pass": t_canon + t_pass}
    return times, collections.Counter(n.op for n in result.graph.nodes)


def _check(what: str, ops: collections.Counter, planted: int) -> None:
    norms, gelus = sum(ops[o] for o in NORM_OPS), sum(ops[o] for o in GELU_OPS)
    leftover = ops["ReduceMean"] + ops["Erf"]
    if norms != planted or gelus != planted or leftover:
        sys.exit(f"{what}: planted {planted} LayerNorms and {planted} GELUs, fused {norms} norms and {gelus} "
                 f"GELUs ({leftover} ReduceMean/Erf left)")


def _without_gc(fn):  # type: ignore[no-untyped-def]
    gc.disable()
    try:
        return fn()
    finally:
        gc.enable()


def measure(nodes: int, repeat: int) -> SizeResult:
    """Build a graph of ``nodes`` nodes and time every stage on it."""
    from gsrewrite.patterns import default_registry
    from gsrewrite.pipelines import apply

    synth = _synth.build(nodes)
    result = SizeResult(synth.nodes, synth.layernorms)
    registry = default_registry()
    best: dict[str, float] = {}
    for _ in range(max(1, repeat)):
        times, ops = _stages(synth.model, registry)
        _check(f"{nodes} nodes, pass", ops, synth.layernorms)
        best = {k: min(v, best.get(k, v)) for k, v in times.items()}
    t_apply, applied = best_of(lambda: apply(synth.model, ["all"], validate=False), repeat)
    _check(f"{nodes} nodes, apply", collections.Counter(n.op_type for n in applied.model.graph.node),
           synth.layernorms)
    t_nogc, _ = best_of(lambda: _without_gc(lambda: apply(synth.model, ["all"], validate=False)), repeat)
    result.times = {**best, "apply": t_apply, "apply, gc off": t_nogc}
    result.counts = dict(applied.counts)
    return result


def _report(results: list[SizeResult], hot: list | None, profiled: int | None) -> str:
    lines = ["# Matcher scaling", "", md.machine_line(), "",
             f"Synthetic graphs (benchmarks/_synth.py): one decomposed LayerNorm and one erf-GELU planted per "
             f"{_synth.BLOCK_NODES} nodes, random elementwise ops in between; all registered patterns, target "
             "`ort`. Best of the runs; per-node times in µs.", "",
             md.table(["nodes", "planted LN + GELU", *STAGES], [
                 [r.nodes, f"{r.planted} + {r.planted}", *(md.seconds(r.times.get(s)) for s in STAGES)]
                 for r in results]), "",
             md.table(["nodes", *(f"{s} µs/node" for s in STAGES)], [
                 [r.nodes, *(f"{r.times[s] / r.nodes * 1e6:.1f}" for s in STAGES)] for r in results]), ""]
    lines += _ratio_lines(results)
    lines += ["", "Counts per pattern (apply): " + "; ".join(
        f"{r.nodes} nodes: {', '.join(f'{k} {v}' for k, v in sorted(r.counts.items()))}" for r in results)]
    if hot:
        lines += ["", f"## Hot spots (cProfile of apply, {profiled} nodes, by own time)", "",
                  md.table(["function", "calls", "own", "cumulative"],
                           [[f"`{f}`", c, md.seconds(o), md.seconds(cu)] for f, c, o, cu in hot])]
    return "\n".join(lines) + "\n"


def _ratio_lines(results: list[SizeResult]) -> list[str]:
    lines = []
    for small, large in itertools.pairwise(results):
        scale = large.nodes / small.nodes
        cells = "; ".join(f"{s} {large.times[s] / small.times[s]:.2f}" for s in STAGES if small.times[s] > 0)
        line = f"- time({large.nodes})/time({small.nodes}) (size x{scale:.1f}): {cells}"
        if (round(small.nodes, -3), round(large.nodes, -3)) == TARGET_SIZES:
            worst = max(large.times[s] / small.times[s] for s in JUDGED)
            verdict = "PASS" if worst <= RATIO_BOUND else "FAIL"
            line += f" -> **{verdict}** (target: {', '.join(JUDGED)} <= {RATIO_BOUND:g}; worst {worst:.2f})"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated node counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (best is kept)")
    parser.add_argument("--quick", action="store_true", help="sizes 1000,10000 and one run each")
    parser.add_argument("--profile", type=int, metavar="NODES", help="also cProfile apply at this size")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "matcher_scaling.md")
    args = parser.parse_args(argv)
    sizes = [1000, 10000] if args.quick else [int(s) for s in args.sizes.split(",")]
    repeat = 1 if args.quick else args.repeat
    results = []
    for nodes in sizes:
        results.append(measure(nodes, repeat))
        print(f"{nodes:>7} nodes: " + ", ".join(f"{s} {md.seconds(t)}" for s, t in results[-1].times.items()),
              flush=True)
    hot = None
    if args.profile:
        from gsrewrite.pipelines import apply

        model = _synth.build(args.profile).model
        hot = profile(lambda: apply(model, ["all"], validate=False))
    report = _report(results, hot, args.profile)
    print("\n".join(_ratio_lines(results)))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
