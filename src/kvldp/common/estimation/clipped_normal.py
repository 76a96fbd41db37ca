"""The error of a normal estimate clipped into its parameter's range.

A frequency estimated by a raw linear statistic X ~ N(t, s^2) and then kept inside
[low, high] (Algorithm 4's correction, an EM fit on the simplex) errs less than X where
the range binds: its mean squared error about the truth t is

    s^2 [Phi(b) - Phi(a) - (b phi(b) - a phi(a)) + a^2 Phi(a) + b^2 (1 - Phi(b))],

a = (low - t)/s, b = (high - t)/s: between s^2/2 (t on a bound) and s^2 (far from both).
:func:`clipped_rmse` evaluates it at a plug-in truth, which is how a clipped point
estimate's standard error is exported (docs/mechanisms.md, *Calibration of standard
errors*).
"""

from __future__ import annotations

import math

import numpy as np

from kvldp.common.primitives import FloatArray

_ERF = np.frompyfunc(math.erf, 1, 1)


def normal_cdf(x: FloatArray) -> FloatArray:
    """Phi(x) elementwise (NaN stays NaN)."""
    return np.asarray(0.5 * (1.0 + _ERF(np.asarray(x, dtype=np.float64) / math.sqrt(2.0))), dtype=np.float64)


def clipped_rmse(truth: FloatArray, se: FloatArray, low: float, high: float) -> FloatArray:
    """RMSE of clip(X, low, high) about ``truth`` for X ~ N(truth, se^2) (0 where se = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(se > 0, (low - truth) / se, -np.inf)
        b = np.where(se > 0, (high - truth) / se, np.inf)
    cdf_a, cdf_b = normal_cdf(a), normal_cdf(b)

    def z_pdf(z: FloatArray) -> FloatArray:  # z phi(z), 0 at +-inf
        finite = np.isfinite(z)
        zf = np.where(finite, z, 0.0)
        return np.where(finite, zf * np.exp(-0.5 * zf * zf) / math.sqrt(2.0 * math.pi), 0.0)

    def sq(z: FloatArray, weight: FloatArray) -> FloatArray:  # z^2 weight, 0 where weight is 0
        return np.where(weight > 0, np.where(np.isfinite(z), z, 0.0) ** 2 * weight, 0.0)

    inner = cdf_b - cdf_a - (z_pdf(b) - z_pdf(a))
    ratio = inner + sq(a, cdf_a) + sq(b, 1.0 - cdf_b)
    return np.asarray(se * np.sqrt(np.maximum(ratio, 0.0)), dtype=np.float64)
