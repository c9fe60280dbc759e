"""Rewrite a case through the library, then compare original and result in onnxruntime ourselves.

Validation inside ``apply`` runs batch 2 / sequence 16 (and a few more sizes); these checks run the sizes
below, with the attention mask padded on the left, the right or not at all. An element agrees when
``|result - original| <= TOL * max(1, |original|)`` (absolute near zero, relative for large values), or when
both are the same NaN or infinity.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx

import gsrewrite

from .cases import Case, feeds

TOL = 1e-3
#: (batch, sequence) pairs none of which validation uses
SIZES = tuple((b, s) for b in (1, 3) for s in (5, 23, 41, 97, 150))


@dataclass
class Mismatch:
    """Where a rewritten model disagrees with its original."""

    batch: int
    seq: int
    padding: str
    output: str
    max_abs: float
    max_excess: float

    def __str__(self) -> str:
        return (f"batch {self.batch}, seq {self.seq}, padding {self.padding}: output {self.output!r} differs by "
                f"{self.max_abs:.3g} (x{self.max_excess:.3g} the tolerance)")


def session(model: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 4  # sizes the original cannot run are skipped, quietly
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def rewrite(case: Case, command: str = "apply") -> gsrewrite.RewriteResult:
    """``gsrewrite.apply(model, patterns=["all"])`` or ``gsrewrite.optimize(model)``, validated."""
    if command == "optimize":
        return gsrewrite.optimize(case.model, device=case.device)
    return gsrewrite.apply(case.model, patterns=["all"], device=case.device)


def _kept_rows(case: Case, name: str, value: np.ndarray, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """A boolean array like ``value``: the elements to compare (all but the padded query rows, when the case's
    mask is row-dependent)."""
    axis = case.query_axis.get(name)
    keep = np.ones(value.shape, bool)
    if axis is None or "mask" not in inputs:
        return keep
    rows = inputs["mask"].astype(bool)  # [batch, seq]
    shape = [rows.shape[0]] + [1] * (value.ndim - 1)
    shape[axis] = rows.shape[1]
    return keep & rows.reshape(shape)


def _errors(want: np.ndarray, have: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Absolute differences, and each as a multiple of its tolerance (inf where only one side is NaN)."""
    want64, have64 = want.astype(np.float64), have.astype(np.float64)
    same = (want64 == have64) | (np.isnan(want64) & np.isnan(have64))  # NaN or inf where the original has it
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(have64 - want64))
        excess = np.where(keep & ~same, diff / (TOL * np.fmax(1.0, np.abs(want64))), 0.0)
    return diff, np.nan_to_num(excess, nan=np.inf)


def compare(case: Case, original, candidate, batch: int, seq: int, padding: str,
            seed: int) -> Mismatch | None:
    """Run both sessions on one input set; the worst disagreeing output, or None."""
    inputs = feeds(case, batch, seq, padding, seed)
    try:
        expected = original.run(None, inputs)
    except Exception:  # the original cannot run at this size: nothing to compare
        return None
    names = [o.name for o in original.get_outputs()]
    got = candidate.run(names, inputs)
    worst = None
    for name, want, have in zip(names, expected, got, strict=True):
        assert have.shape == want.shape, f"{name}: shape {have.shape}, the original gives {want.shape}"
        keep = _kept_rows(case, name, want, inputs)
        diff, excess = _errors(want, have, keep)
        if excess.size and excess.max() > 1.0 and (worst is None or excess.max() > worst.max_excess):
            worst = Mismatch(batch, seq, padding, name, float(np.where(keep, diff, 0).max()), float(excess.max()))
    return worst


def check(case: Case, sizes: Iterable[tuple[int, int]], paddings: Iterable[str], command: str = "apply",
          seed: int = 0) -> gsrewrite.RewriteResult:
    """Rewrite ``case``; assert that the result agrees with the original at every size and padding (or that
    nothing was rewritten). Returns the RewriteResult."""
    result = rewrite(case, command)
    if not result.changed:
        return result
    original, candidate = session(case.model), session(result.model)
    mismatches = [m for b, s in sizes for p in paddings
                  if (m := compare(case, original, candidate, b, s, p, seed)) is not None]
    fired = {k: v for k, v in result.counts.items() if v}
    assert not mismatches, (f"{command} fired {fired} on [{case.label}] and the result differs at "
                            + "; ".join(map(str, mismatches)))
    return result
