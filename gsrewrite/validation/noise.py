"""The model's own noise: how much the original's outputs move when only the rounding order of its arithmetic
changes, measured on the validation's own inputs.

A deep real model's outputs move by ~1e-4..1e-3 when onnxruntime's graph optimizer rewrites it (its fusions sum in
another order): SmolLM2-135M's logits by 2.5e-4 at a 16-token past and 6.0e-4 at 256, against values of ~20. A
fused kernel is right when it moves the outputs by about as much; a wrong rewrite moves them by O(1). So when a
candidate misses the element-wise rule, the original runs once more per input set in a session with onnxruntime's
optimizations on (``ORT_ENABLE_ALL``; validation sessions run with them off), and each comparison is judged again
against that movement (:class:`~gsrewrite.validation.criteria.Criterion`, ``noise_factor``). Measured once per
validator, after the candidate's session is closed, only when some candidate needs it: models that pass the plain
rule pay nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gsrewrite.errors import ValidationError
from gsrewrite.model_io.source import Source
from gsrewrite.validation.metrics import compare_output
from gsrewrite.validation.report import OutputComparison
from gsrewrite.validation.runner import open_session

log = logging.getLogger(__name__)

#: What the noise is measured against, for reports.
SOURCE = "the original at onnxruntime's ORT_ENABLE_ALL vs ORT_DISABLE_ALL"

#: (size set, run, output) -> (max abs of a float output, changed elements of an integer output)
Key = tuple[str, int, str]


@dataclass
class Noise:
    """The original's movement under onnxruntime's optimizer, per size set, run and output."""

    values: dict[Key, tuple[float | None, int | None]] = field(default_factory=dict)
    source: str = SOURCE

    def judged(self, c: OutputComparison) -> OutputComparison:
        """``c`` with the noise of its set, run and output attached (unchanged when none was measured)."""
        value = self.values.get((c.size_set or "", c.run or 0, c.name))
        if value is None or c.problem is not None:
            return c
        max_abs, mismatches = value
        return dataclasses.replace(c, noise_max_abs=None if c.exact else max_abs,
                                   noise_mismatches=mismatches if c.exact else None)

    def largest(self) -> dict[str, float]:
        """Output -> its largest float movement over every set and run (for messages)."""
        out: dict[str, float] = {}
        for (_, _, name), (max_abs, _) in self.values.items():
            if max_abs is not None:
                out[name] = max(out.get(name, 0.0), max_abs)
        return out


def measure_noise(original: Source, runs: Sequence[tuple[str, int, Callable[[], Mapping[str, np.ndarray]]]],
                  expected: Sequence[Mapping[str, Any]], providers: Sequence[str] | None = None) -> Noise | None:
    """Run ``original`` with onnxruntime's optimizations on each feed of ``runs`` (size set, run, feed maker) and
    measure how far its outputs move from ``expected`` (the unoptimized reference outputs, in the same order).
    ``None`` when onnxruntime cannot optimize or run the model (the plain rule then stands)."""
    noise = Noise()
    try:
        with open_session(original, providers, optimized=True) as session:
            for (set_name, run, make_feed), reference in zip(runs, expected, strict=True):
                outputs = session.run(make_feed())
                for name, value in reference.items():
                    if isinstance(value, list) or name not in outputs or isinstance(outputs[name], list):
                        continue
                    c = compare_output(name, run, np.asarray(value), np.asarray(outputs[name]))
                    if c.problem is None:
                        noise.values[(set_name, run, name)] = (c.max_abs, c.mismatches if c.exact else None)
    except ValidationError as exc:
        log.info("the model's own noise could not be measured: %s", str(exc).splitlines()[0])
        return None
    moved = {name: value for name, value in noise.largest().items() if value > 0}
    log.info("the original's own noise (%s): %s", SOURCE,
             ", ".join(f"{name} {value:.3g}" for name, value in list(moved.items())[:8]) or "none")
    return noise
