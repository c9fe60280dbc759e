"""When an output of the candidate agrees with the original's: the one rule that validation, ``gsrewrite validate``
and every compression strategy judge by (``docs/validation.md``, "The pass/fail rule").

* A NaN or infinity where the original's element is finite, a finite value where it is not, NaN against an
  infinity, or the other infinity: always a failure (``non-finite``).
* Integer, bool and string outputs: at least ``min_agreement`` of the elements equal (1.0, the default: exact)
  (``agreement``).
* Float outputs: element by element within ``atol``/``rtol`` (``atol/rtol``, what rewrites are held to), or, when
  ``min_cosine`` or ``max_abs`` is set, those statistics instead (``cosine``, ``max abs``: what compression is
  held to).
* Float outputs holding class scores (:mod:`gsrewrite.validation.class_scores`): when ``min_top1`` is set, at
  least that share of rows keeps its top-1 class (``top-1``).

Rates (agreement, top-1) are judged on the elements or rows of every run together: a one-row run says little.

**The model's own noise.** A deep model's float outputs move by ~1e-4..1e-3 when only the rounding order of its
arithmetic changes (onnxruntime's own graph optimizer does that to every model it runs). Where the original's
outputs move by more than ``atol`` under onnxruntime's optimizer (:mod:`gsrewrite.validation.noise` measures it on
the same inputs), an element-wise comparison is judged against ``noise_factor`` times that movement instead of
``atol`` (``noise_max_abs`` on the comparison), and integer outputs may differ in ``noise_factor`` times the
elements the optimizer changed (``noise_mismatches``): a fused kernel within the noise onnxruntime itself adds is
right, a wrong rewrite (off by O(1)) is still caught.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gsrewrite.errors import UsageError

if TYPE_CHECKING:
    from gsrewrite.protocols import Tolerance
    from gsrewrite.validation.report import OutputComparison

NON_FINITE = "non-finite"
ELEMENTS = "atol/rtol"
COSINE = "cosine"
MAX_ABS = "max abs"
AGREEMENT = "agreement"
TOP1 = "top-1"
#: How far beyond the model's own noise (onnxruntime's optimized against its unoptimized run) a rewrite may move
#: an output: a wrong rewrite is off by O(1), orders of magnitude beyond; a correct fused kernel measured 0.9-1.3x
#: the noise on a real 30-layer decoder (docs/validation.md, "The model's own noise").
NOISE_FACTOR = 8.0


@dataclass(frozen=True)
class Criterion:
    """The pass/fail rule of one validation (see the module docstring)."""

    atol: float = 1e-4
    rtol: float = 1e-3
    min_cosine: float | None = None
    max_abs: float | None = None
    min_agreement: float = 1.0
    min_top1: float | None = None
    #: element-wise rules only: how many times the model's own noise an output may move (0: never widened)
    noise_factor: float = NOISE_FACTOR

    @classmethod
    def of(cls, tolerance: Tolerance) -> Criterion:
        """The rule a compression strategy's tolerance stands for."""
        return cls(min_cosine=tolerance.min_cosine, max_abs=tolerance.max_abs,
                   min_agreement=getattr(tolerance, "min_agreement", 1.0),
                   min_top1=getattr(tolerance, "min_top1", None))

    @property
    def elementwise(self) -> bool:
        """True when float outputs are judged element by element (atol/rtol), not by cosine / max abs."""
        return self.min_cosine is None and self.max_abs is None

    def check(self) -> None:
        """Raise :class:`UsageError` for a value outside its range (NaN included)."""
        if not (self.atol >= 0 and self.rtol >= 0):
            raise UsageError(f"tolerances must be non-negative numbers, got atol={self.atol!r}, rtol={self.rtol!r}")
        bounds: dict[str, tuple[Any, float, float]] = {
            "minimum cosine": (self.min_cosine, -1.0, 1.0), "max abs": (self.max_abs, 0.0, math.inf),
            "minimum agreement": (self.min_agreement, 0.0, 1.0), "minimum top-1 agreement": (self.min_top1, 0.0, 1.0)}
        if not (isinstance(self.noise_factor, int | float) and 0 <= self.noise_factor < math.inf):
            raise UsageError(f"the noise factor must be a non-negative number, got {self.noise_factor!r}")
        for what, (value, low, high) in bounds.items():
            if value is not None and not (isinstance(value, int | float) and low <= value <= high):
                raise UsageError(f"the {what} must be a number from {low:g} to {high:g}, got {value!r}")

    def failures(self, c: OutputComparison) -> tuple[str, ...]:
        """The metrics on which ``c`` fails this rule, in a fixed order (empty: it agrees). A ``problem``
        (missing output, other shape or dtype) is not a metric: the comparison reports it itself."""
        if c.problem is not None:
            return ()
        failed = []
        if c.nonfinite_mismatches:
            failed.append(NON_FINITE)
        if c.exact:
            allowed = max(self.noise_factor * (c.noise_mismatches or 0), (1.0 - self.min_agreement) * c.elements)
            if c.mismatches > allowed:
                failed.append(AGREEMENT)
            return tuple(failed)
        if self.elementwise:
            if c.noise_max_abs is not None:
                if (c.max_abs_outside_rtol or 0.0) > self.noise_atol(c.noise_max_abs):
                    failed.append(ELEMENTS)
            elif c.mismatches > c.nonfinite_mismatches:
                failed.append(ELEMENTS)
        else:
            if self.min_cosine is not None and not (c.cosine is not None and c.cosine >= self.min_cosine):
                failed.append(COSINE)
            if self.max_abs is not None and not (c.max_abs is not None and c.max_abs <= self.max_abs):
                failed.append(MAX_ABS)
        if self.min_top1 is not None and c.top1_rows and c.top1_agree < self.min_top1 * c.top1_rows:
            failed.append(TOP1)
        return tuple(failed)

    def noise_atol(self, noise_max_abs: float) -> float:
        """The absolute tolerance of an output whose original moves by ``noise_max_abs`` under onnxruntime's
        optimizer: ``noise_factor`` times that, never below ``atol``."""
        return max(self.atol, self.noise_factor * noise_max_abs)

    def describe(self) -> str:
        """``atol=0.0001, rtol=0.001`` or ``cosine >= 0.99, agreement >= 99%, top-1 >= 99%``."""
        if self.elementwise:
            parts = [f"atol={self.atol:g}, rtol={self.rtol:g}"]
        else:
            parts = [] if self.min_cosine is None else [f"cosine >= {self.min_cosine:g}"]
            parts += [] if self.max_abs is None else [f"max abs <= {self.max_abs:g}"]
        if self.min_agreement < 1.0:
            parts.append(f"agreement >= {percent(self.min_agreement)}")
        if self.min_top1 is not None:
            parts.append(f"top-1 >= {percent(self.min_top1)}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"atol": self.atol, "rtol": self.rtol, "min_cosine": self.min_cosine, "max_abs": self.max_abs,
                "min_agreement": self.min_agreement, "min_top1": self.min_top1, "noise_factor": self.noise_factor}


def percent(rate: float) -> str:
    """``99%``, ``99.6%``, ``33.333%``: a rate with at most three decimals, never rounded up to ``100%``."""
    text = f"{100 * rate:.3f}".rstrip("0").rstrip(".")
    return ("99.999" if text == "100" and rate < 1.0 else text) + "%"
