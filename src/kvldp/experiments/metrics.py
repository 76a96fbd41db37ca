"""Top-k metrics of the FHR paper (Zhao et al. 2022, Eq. 13-16; docs/mechanisms.md, *Top-k metrics*).

Frequencies are fractions of the users. C is the true top-k (ties by key id), the
estimated top-k ranks the estimate the same way. Zero or negative estimates inside C are
floored at 1e-12 before the KL divergences, and both vectors renormalised over C (the
paper leaves them open; items nobody holds are left out of C for KLD and RE: they have no
ratio); RE is the median relative error over C, SE the mean squared error
over the keys both top-k lists share (NaN when they share none), NCR the rank-weighted
share of the true top-k that the estimated top-k recovers.
"""

from __future__ import annotations

import numpy as np

from kvldp.common.primitives import FloatArray, IntArray


def top(values: FloatArray, k: int) -> IntArray:
    """Indices of the k largest values, ties broken by index ascending."""
    clean = np.nan_to_num(values, nan=-np.inf)
    return np.lexsort((np.arange(clean.shape[0]), -clean))[:k]


def _held_top(true_f: FloatArray, k: int) -> IntArray:
    """The true top-k restricted to items someone holds (a zero truth has no ratio or log)."""
    c = top(true_f, k)
    return c[true_f[c] > 0]


def kld(true_f: FloatArray, est_f: FloatArray, k: int) -> float:
    c = _held_top(true_f, k)
    real = true_f[c] / true_f[c].sum()
    est = np.maximum(np.nan_to_num(est_f[c], nan=0.0), 1e-12)
    est = est / est.sum()
    return float(0.5 * (np.sum(real * np.log(real / est)) + np.sum(est * np.log(est / real))))


def relative_error(true_f: FloatArray, est_f: FloatArray, k: int) -> float:
    c = _held_top(true_f, k)
    return float(np.median(np.abs(true_f[c] - est_f[c]) / true_f[c]))


def squared_error(true_f: FloatArray, est_f: FloatArray, k: int) -> float:
    both = np.intersect1d(top(true_f, k), top(est_f, k))
    if both.size == 0:
        return float("nan")
    return float(np.mean((true_f[both] - est_f[both]) ** 2))


def ncr(true_f: FloatArray, est_f: FloatArray, k: int) -> float:
    k = min(k, true_f.shape[0])
    score = np.zeros(true_f.shape[0])
    score[top(true_f, k)] = np.arange(k, 0, -1)
    return float(score[top(est_f, k)].sum() / (k * (k + 1) / 2))


def top_k_metrics(true_f: FloatArray, est_f: FloatArray, k: int) -> dict[str, float]:
    """All four of the paper's metrics at top-k, named ``kld@k``, ``re@k``, ``se@k``, ``ncr@k``."""
    return {
        f"kld@{k}": kld(true_f, est_f, k),
        f"re@{k}": relative_error(true_f, est_f, k),
        f"se@{k}": squared_error(true_f, est_f, k),
        f"ncr@{k}": ncr(true_f, est_f, k),
    }
