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


@dataclass(frozen=True)
class Criterion:
    """The pass/fail rule of one validation (see the module docstring)."""

    atol: float = 1e-4
    rtol: float = 1e-3
    min_cosine: float | None = None
    max_abs: float | None = None
    min_agreement: float = 1.0
    min_top1: float | None = None

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
            if c.mismatches and (c.elements - c.mismatches) < self.min_agreement * c.elements:
                failed.append(AGREEMENT)
            return tuple(failed)
        if self.elementwise:
            if c.mismatches > c.nonfinite_mismatches:
                failed.append(ELEMENTS)
        else:
            if self.min_cosine is not None and not (c.cosine is not None and c.cosine >= self.min_cosine):
                failed.append(COSINE)
            if self.max_abs is not None and not (c.max_abs is not None and c.max_abs <= self.max_abs):
                failed.append(MAX_ABS)
        if self.min_top1 is not None and c.top1_rows and c.top1_agree < self.min_top1 * c.top1_rows:
            failed.append(TOP1)
        return tuple(failed)

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
                "min_agreement": self.min_agreement, "min_top1": self.min_top1}


def percent(rate: float) -> str:
    """``99%``, ``99.6%``, ``33.333%``: a rate with at most three decimals, never rounded up to ``100%``."""
    text = f"{100 * rate:.3f}".rstrip("0").rstrip(".")
    return ("99.999" if text == "100" and rate < 1.0 else text) + "%"
