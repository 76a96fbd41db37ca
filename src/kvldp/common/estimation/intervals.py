"""95% intervals that keep their coverage where a point estimate is clipped, and the
standard errors they imply.

Every estimator of kvldp has an *inference basis*: linear statistics of the counts that
are unbiased and close to normal (the raw frequency; a mean's numerator and
denominator). Its intervals are built on that basis, whatever the point estimate does
(clipping, projection, EM, shrinkage), so their coverage does not depend on the point
estimator:

* a frequency's interval is raw ± Z95·se intersected with [0, 1] (:func:`clipped_interval`):
  the truth lies in [0, 1], so intersecting loses no coverage;
* a mean's interval is Fieller's confidence set for a ratio N/D of two jointly normal
  estimates, {m : (N - m D)^2 <= Z95^2 Var(N - m D)}, intersected with [-1, 1]
  (:func:`fieller_interval`). It is exact under normality, and the delta method's
  symmetric interval is its first-order approximation. When D is not significantly
  different from 0 (D^2 <= Z95^2 Var D) the set is unbounded: the data cannot tell the
  key's holders from nobody, and the mean is *not estimable* at 95%.

:func:`interval_stderr` turns an interval into the standard error it implies (its
half-width over Z95): equal to the analytic one where the range does not bind, smaller
where it does — where a clipped point estimate also errs less.
Reference: docs/mechanisms.md, *Calibration of standard errors*.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kvldp.common.estimation.estimate import Z95
from kvldp.common.primitives import FloatArray


def clipped_interval(
    raw: FloatArray, se: FloatArray, low: float = 0.0, high: float = 1.0
) -> tuple[FloatArray, FloatArray]:
    """raw ± Z95·se intersected with [low, high]; an interval wholly outside the range
    collapses onto the nearer end (NaN stays NaN)."""
    lo = np.clip(raw - Z95 * se, low, high)
    hi = np.clip(raw + Z95 * se, low, high)
    return lo, hi


def interval_stderr(lo: FloatArray, hi: FloatArray) -> FloatArray:
    """The standard error a 95% interval implies: its half-width over Z95."""
    return np.asarray((hi - lo) / (2.0 * Z95), dtype=np.float64)


def fieller_interval(
    num: FloatArray,
    den: FloatArray,
    var_num: FloatArray,
    var_den: FloatArray,
    cov: FloatArray,
    low: float = -1.0,
    high: float = 1.0,
) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
    """(lo, hi, estimable) of Fieller's 95% set for num/den, intersected with [low, high].

    ``estimable`` is False (and lo, hi NaN) where den is not significantly above 0: the set
    is then unbounded, or (den significantly negative, impossible for a count of holders)
    meaningless. A bounded set that misses [low, high] collapses onto the
    nearer end of the range.
    """
    z2 = Z95 * Z95
    a = den * den - z2 * var_den
    b = num * den - z2 * cov
    c = num * num - z2 * var_num
    with np.errstate(invalid="ignore", divide="ignore"):
        disc = np.sqrt(np.maximum(b * b - a * c, 0.0))
        lo = (b - disc) / a
        hi = (b + disc) / a
    estimable = np.isfinite(num) & np.isfinite(den) & (a > 0) & (den > 0)
    lo = np.where(estimable, np.clip(lo, low, high), np.nan)
    hi = np.where(estimable, np.clip(hi, low, high), np.nan)
    return lo, hi, estimable
