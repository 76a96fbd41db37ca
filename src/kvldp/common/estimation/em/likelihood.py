"""The count model shared by the EM solvers: P theta, its transpose, and the log-likelihood.

A group's counts c (J outputs) under a likelihood P (J x K, or one per group) and a
latent distribution theta (K states): :func:`forward` is the output distribution
P theta, :func:`backward` applies P^T, :func:`log_likelihood` is the objective both
solvers (:mod:`~kvldp.common.estimation.em.newton`, :mod:`~kvldp.common.estimation.em.plain`) raise.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


def forward(P: FloatArray, theta: FloatArray) -> FloatArray:
    out = theta @ P.T if P.ndim == 2 else np.einsum("gjk,gk->gj", P, theta)
    return np.asarray(out, dtype=np.float64)


def backward(P: FloatArray, ratio: FloatArray) -> FloatArray:
    out = ratio @ P if P.ndim == 2 else np.einsum("gj,gjk->gk", ratio, P)
    return np.asarray(out, dtype=np.float64)


def log_likelihood(P: FloatArray, counts: FloatArray, theta: FloatArray) -> FloatArray:
    """sum_z c_z ln (P theta)_z per group (terms with c_z = 0 are 0)."""
    dist = forward(P, theta)
    with np.errstate(divide="ignore"):
        logd = np.log(dist)
    return np.asarray(np.where(counts > 0, counts * logd, 0.0).sum(axis=1), dtype=np.float64)
