"""The metrics of one output of the candidate against the original's, judged by a
:class:`~gsrewrite.validation.criteria.Criterion`.

The element-wise rule is polygraphy's default (``--check-error-stat elemwise``): an element is outside
tolerance when ``|a - b| > atol`` **and** ``|a - b| / |b| > rtol``, with ``b`` the original (reference) value and
zeros in ``b`` replaced by float64 epsilon. Where a value is non-finite in either model the element agrees only
when both are NaN, or both are the same infinity (``nonfinite_mismatches`` counts the others). Bool and integer
outputs are compared exactly (``agreement``: the share of equal elements). Float class scores also get their
top-1 agreement (:mod:`gsrewrite.validation.class_scores`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gsrewrite.validation.class_scores import ClassAxis
from gsrewrite.validation.criteria import Criterion
from gsrewrite.validation.report import OutputComparison

#: What polygraphy adds to zero reference values before dividing (np.finfo(np.float64).eps).
EPSILON = 2.220446049250313e-16


def compare_output(
    name: str, run: int, original: np.ndarray, candidate: np.ndarray, atol: float = 1e-4, rtol: float = 1e-3, *,
    criterion: Criterion | None = None, class_axis: ClassAxis | None = None,
) -> OutputComparison:
    """Compare ``candidate`` against ``original`` (the reference) and judge it by ``criterion`` (default: element
    by element within ``atol``/``rtol``, integers exact). ``class_axis``: the output holds class scores along it
    (top-1 agreement is measured)."""
    rule = criterion if criterion is not None else Criterion(atol=atol, rtol=rtol)
    result = _measure(name, run, np.asarray(original), np.asarray(candidate), rule.atol, rule.rtol, class_axis)
    return _replace(result, failed=rule.failures(result))


def _measure(name: str, run: int, ref: np.ndarray, cand: np.ndarray, atol: float, rtol: float,
             class_axis: ClassAxis | None) -> OutputComparison:
    base = OutputComparison(
        name=name,
        run=run,
        shape=tuple(ref.shape),
        dtype=str(ref.dtype),
        candidate_shape=tuple(cand.shape),
        candidate_dtype=str(cand.dtype),
        elements=int(ref.size),
    )
    if ref.shape != cand.shape:
        return _replace(base, problem=f"shape {_fmt(ref.shape)} vs {_fmt(cand.shape)}", mismatches=ref.size)
    if not (_is_numeric(ref) and _is_numeric(cand)):
        return _compare_non_numeric(base, ref, cand)
    if ref.dtype.kind in "biu" and cand.dtype.kind in "biu":
        result = _compare_exact(base, ref, cand)
    else:
        result = _compare_float(base, ref, cand, atol, rtol)
        axis = class_axis.of(ref) if class_axis is not None and ref.dtype.kind in "fV" else None
        if axis is not None:
            rows, agree = top1_agreement(ref, cand, axis)
            result = _replace(result, class_axis=axis, top1_rows=rows, top1_agree=agree)
    if ref.dtype != cand.dtype:
        result = _replace(result, problem=f"dtype {ref.dtype} vs {cand.dtype}")
    return result


def missing_output(name: str, run: int, original: np.ndarray) -> OutputComparison:
    """The comparison for an output of the original that the candidate does not produce."""
    ref = np.asarray(original)
    return OutputComparison(
        name=name,
        run=run,
        shape=tuple(ref.shape),
        dtype=str(ref.dtype),
        elements=int(ref.size),
        mismatches=int(ref.size),
        problem="missing in candidate",
    )


def _compare_exact(base: OutputComparison, ref: np.ndarray, cand: np.ndarray) -> OutputComparison:
    a, b = cand.astype(np.float64), ref.astype(np.float64)
    absdiff = np.abs(a - b)
    reldiff = absdiff / _reference_magnitude(b)
    return _replace(
        base,
        exact=True,
        mismatches=int(np.count_nonzero(cand != ref)),
        max_abs=_max(absdiff),
        max_rel=_max(reldiff),
    )


def _compare_float(
    base: OutputComparison, ref: np.ndarray, cand: np.ndarray, atol: float, rtol: float
) -> OutputComparison:
    a, b = cand.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):
        absdiff = np.abs(np.where(finite, a - b, 0.0))
    reldiff = absdiff / _reference_magnitude(b)
    outside = (absdiff > atol) & (reldiff > rtol)
    same_non_finite = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
    non_finite = ~finite & ~same_non_finite
    mismatched = np.where(finite, outside, non_finite)
    return _replace(
        base,
        mismatches=int(np.count_nonzero(mismatched)),
        nonfinite_mismatches=int(np.count_nonzero(non_finite)),
        max_abs=_max(absdiff[finite]),
        max_rel=_max(reldiff[finite]),
        max_abs_outside_rtol=_max(absdiff[finite & (reldiff > rtol)]),
        cosine=cosine_similarity(a[finite], b[finite]),
        nan_original=int(np.count_nonzero(np.isnan(b))),
        nan_candidate=int(np.count_nonzero(np.isnan(a))),
        inf_original=int(np.count_nonzero(np.isinf(b))),
        inf_candidate=int(np.count_nonzero(np.isinf(a))),
    )


def _compare_non_numeric(base: OutputComparison, ref: np.ndarray, cand: np.ndarray) -> OutputComparison:
    mismatches = int(np.count_nonzero(ref != cand))
    problem = None if ref.dtype.kind == cand.dtype.kind else f"dtype {ref.dtype} vs {cand.dtype}"
    return _replace(base, exact=True, mismatches=mismatches, problem=problem)


def top1_agreement(ref: np.ndarray, cand: np.ndarray, axis: int) -> tuple[int, int]:
    """(rows, rows whose top-1 class agrees) along ``axis``. A row agrees when the candidate's top class holds the
    original's top score (a tie in the original accepts either class); NaN scores are never a row's top."""
    b = np.moveaxis(ref.astype(np.float64), axis, -1).reshape(-1, ref.shape[axis])
    a = np.moveaxis(cand.astype(np.float64), axis, -1).reshape(-1, ref.shape[axis])
    a, b = np.where(np.isnan(a), -np.inf, a), np.where(np.isnan(b), -np.inf, b)
    chosen = np.take_along_axis(b, np.argmax(a, axis=1)[:, None], axis=1)[:, 0]
    return int(b.shape[0]), int(np.count_nonzero(chosen == b.max(axis=1)))


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two flattened arrays: 1.0 when both are all zero, 0.0 when one is."""
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    # einsum, not BLAS (np.dot, np.linalg.norm): on small outputs BLAS's thread pool costs more than the sums
    norm_a, norm_b = math.sqrt(float(np.einsum("i,i->", a, a))), math.sqrt(float(np.einsum("i,i->", b, b)))
    if norm_a == 0.0 and norm_b == 0.0:
        return 1.0
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    return max(-1.0, min(1.0, float(np.einsum("i,i->", a, b)) / (norm_a * norm_b)))


def _reference_magnitude(b: np.ndarray) -> np.ndarray:
    magnitude = np.abs(np.where(np.isfinite(b), b, 0.0))
    return np.where(magnitude == 0.0, EPSILON, magnitude)


def _max(values: np.ndarray) -> float:
    return float(values.max()) if values.size else 0.0


def _is_numeric(array: np.ndarray) -> bool:
    if array.dtype.kind in "biuf":
        return True
    return array.dtype.kind == "V" and np.can_cast(array.dtype, np.float64)  # ml_dtypes (bfloat16, float8)


def _replace(base: OutputComparison, **changes: object) -> OutputComparison:
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
