"""``gsrewrite bench``: onnxruntime latency of models on the same inputs, runs interleaved."""

from __future__ import annotations

import click

from gsrewrite.cli._options import input_shape_option, input_shapes, inputs_option, json_option
from gsrewrite.cli._output import console, emit_json, table


@click.command()
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option("--runs", type=click.IntRange(min=1), default=None,
              help="Timed runs per model (default: up to 20, as many as fit the time budget).")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help="Untimed runs first (default: up to 2, within a fifth of the time budget).")
@click.option("--time-budget", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              metavar="SECONDS", help="Seconds the default warm-up and timed runs may take together.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="onnxruntime intra-op threads.")
@click.option("--ort-level", type=click.Choice(["disable", "basic", "extended", "all"]), default="all",
              show_default=True, help="onnxruntime graph optimization level of the sessions.")
@inputs_option
@input_shape_option
@click.option("--save-optimized", default=None, metavar="OUT.onnx",
              help="Write onnxruntime's own offline-optimized model of the first MODEL (at --ort-level).")
@click.option("--past", type=click.IntRange(min=0), default=128, show_default=True,
              help="A decoder with a KV cache: cached tokens of the decode step timed.")
@click.option("--new-tokens", type=click.IntRange(min=1), default=128, show_default=True,
              help="A decoder with a KV cache: tokens of the prefill timed (no past).")
@json_option
def bench(models: tuple[str, ...], runs: int | None, warmup: int | None, time_budget: float, threads: int,
          ort_level: str, inputs: str | None, input_shape: tuple[str, ...], save_optimized: str | None, past: int,
          new_tokens: int, as_json: bool) -> None:
    """Time MODEL(s) in onnxruntime on the same inputs, runs interleaved across the models; min and median,
    and the ratio to the first model. A decoder with a KV cache is timed at a decode step (1 new token over
    --past cached ones) and at a prefill (--new-tokens tokens), with tokens per second."""
    import os

    from gsrewrite.cli._output import working
    from gsrewrite.errors import OutputError
    from gsrewrite.model_io import check_output_path, load_model
    from gsrewrite.pipelines.bench import bench as run
    from gsrewrite.pipelines.bench import bench_inputs
    from gsrewrite.validation.phases import decoder_phases

    if save_optimized is not None:
        if os.path.exists(save_optimized):
            raise OutputError(f"{save_optimized} exists: remove it or give another path")
        check_output_path(save_optimized, input_path=models[0])
    loaded = [(path, load_model(path)) for path in models]
    sizes = input_shapes(input_shape)
    phases = decoder_phases(loaded[0][1], sizes, past=past, new_tokens=new_tokens) if inputs is None \
        else None
    if phases is not None:
        _bench_decoder(loaded, phases, runs, warmup, threads, ort_level, save_optimized, time_budget, as_json)
        return
    feed = bench_inputs(loaded[0][1], inputs, sizes)
    with working(f"timing {len(models)} model(s)..."):
        result = run(loaded, runs=runs, warmup=warmup, threads=threads, ort_level=ort_level, inputs=feed,
                     save_optimized=save_optimized, time_budget=time_budget)
    if as_json:
        emit_json(result.to_dict() | ({"saved_optimized": save_optimized} if save_optimized else {}))
        return
    first = result.timings[0]
    rows = [(t.model, f"{t.min_ms:.3f}", f"{t.median_ms:.3f}", f"{t.min_ms / first.min_ms:.3f}",
             f"{t.median_ms / first.median_ms:.3f}") for t in result.timings]
    shapes_text = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in result.inputs.items())
    out = console()
    count = f"{result.runs} interleaved run(s)"
    if result.cut_short:
        count += f" (the {result.budget_s:g} s time budget; --runs N for more)"
    out.print(table(f"Latency ({count}, {threads} thread(s), ORT level {ort_level}; {shapes_text})",
                    ["model", "min ms", "median ms", "min ratio", "median ratio"], rows))
    if save_optimized:
        out.print(f"Wrote {save_optimized} (onnxruntime's optimized model at level {ort_level})", markup=False,
                  highlight=False)


def _bench_decoder(loaded: list, phases: list, runs: int | None, warmup: int | None, threads: int, ort_level: str,
                   save_optimized: str | None, time_budget: float, as_json: bool) -> None:
    """A decoder's decode step and prefill, each timed interleaved across the models, with tokens per second."""
    from gsrewrite.cli._output import working
    from gsrewrite.pipelines.bench import bench as run

    results = []
    for phase in phases:
        with working(f"timing the {phase.name} of {len(loaded)} model(s)..."):
            results.append(run(loaded, runs=runs, warmup=warmup, threads=threads, ort_level=ort_level,
                               inputs=phase.feed, save_optimized=save_optimized if phase is phases[0] else None,
                               time_budget=time_budget / len(phases)))
    if as_json:
        emit_json({"phases": {phase.name: result.to_dict() | {
            "past": phase.past, "tokens": phase.tokens,
            "tokens_per_s": [round(phase.tokens / (t.min_ms / 1000), 2) for t in result.timings]}
            for phase, result in zip(phases, results, strict=True)}}
            | ({"saved_optimized": save_optimized} if save_optimized else {}))
        return
    out = console()
    for phase, result in zip(phases, results, strict=True):
        first = result.timings[0]
        rows = [(t.model, f"{t.min_ms:.3f}", f"{t.median_ms:.3f}", f"{phase.tokens / (t.min_ms / 1000):.1f}",
                 f"{t.min_ms / first.min_ms:.3f}", f"{t.median_ms / first.median_ms:.3f}") for t in result.timings]
        what = (f"{phase.name}: {phase.tokens} token(s) over a past of {phase.past}" if phase.name == "decode"
                else f"{phase.name}: {phase.tokens} token(s), no past")
        count = f"{result.runs} interleaved run(s)"
        if result.cut_short:
            count += f" (the {result.budget_s:g} s time budget; --runs N for more)"
        out.print(table(f"Latency, {what} ({count}, {threads} thread(s), ORT level {ort_level})",
                        ["model", "min ms", "median ms", "tokens/s", "min ratio", "median ratio"], rows))
    if save_optimized:
        out.print(f"Wrote {save_optimized} (onnxruntime's optimized model at level {ort_level})", markup=False,
                  highlight=False)
