"""Variance algebra shared by the estimators: quadratic forms and the delta method
(docs/mechanisms.md, *Standard errors*).

Every standard error kvldp exports is an analytic variance evaluated at a plug-in
point: the exact covariance of the integer statistics under the mechanism (given the
population), pushed through the estimator — exactly when it is linear, by the delta
method when it is a ratio (means, conditional frequencies).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def quad(u: FloatArray, cov: FloatArray) -> FloatArray:
    """u^T C u for a batch: u is (G, J) or (J,), cov is (G, J, J)."""
    ub = np.broadcast_to(u, cov.shape[:-1])
    return np.asarray(np.einsum("gj,gjk,gk->g", ub, cov, ub), dtype=np.float64)


def quad2(u: FloatArray, v: FloatArray, cov: FloatArray) -> FloatArray:
    """u^T C v for a batch: the covariance of two linear forms (u, v are (J,) or (G, J))."""
    ub = np.broadcast_to(u, cov.shape[:-1])
    vb = np.broadcast_to(v, cov.shape[:-1])
    return np.asarray(np.einsum("gj,gjk,gk->g", ub, cov, vb), dtype=np.float64)


def ratio_variance(
    num: FloatArray, den: FloatArray, var_num: FloatArray, var_den: FloatArray, cov: FloatArray | float = 0.0
) -> FloatArray:
    """Delta-method variance of num/den: (V_n - 2R C + R^2 V_d) / den^2 (NaN if den = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = num / den
        out = (var_num - 2.0 * r * cov + r * r * var_den) / (den * den)
    return np.where(den != 0, np.maximum(out, 0.0), np.nan)


def stderr(variance: FloatArray) -> FloatArray:
    """Square root that maps negative round-off to 0 and keeps NaN."""
    return np.sqrt(np.maximum(variance, 0.0))


def delta_gradient(
    fn: Callable[[FloatArray], FloatArray], counts: FloatArray, rel_step: float = 1e-6
) -> FloatArray:
    """Gradient of ``fn(counts)`` per group by central differences, one column at a time for
    all groups: ``counts`` is (G, J), the result (G, J)."""
    grads = np.empty_like(counts, dtype=np.float64)
    for j in range(counts.shape[1]):
        h = rel_step * np.maximum(np.abs(counts[:, j]), 1.0)
        up = counts.copy()
        down = counts.copy()
        up[:, j] += h
        down[:, j] -= h
        grads[:, j] = (fn(up) - fn(down)) / (2 * h)
    return grads


def delta_variance(
    fn: Callable[[FloatArray], FloatArray], counts: FloatArray, cov: FloatArray, rel_step: float = 1e-6
) -> FloatArray:
    """First-order (delta-method) variance of ``fn(counts)`` for estimators with no tidy
    closed-form gradient (PrivKVM's iterations). ``counts`` is (G, J), ``cov`` (G, J, J);
    the gradient is :func:`delta_gradient`'s."""
    return quad(delta_gradient(fn, counts, rel_step), cov)
