"""Count-based expectation maximisation (spec §0.5), vectorised over independent groups.

Every mechanism whose report is one symbol of a finite alphabet has a likelihood
``P[z | x]`` (J outputs x K latent inputs). The per-user EM of the papers depends on a
user only through its output symbol, so EM needs just the histogram of outputs — the
aggregator's statistics. Keys are independent problems with the same (or per-key) P;
they are solved together as the rows of one array, each stopping on its own criterion
(max |theta_t+1 - theta_t| <= tol), exactly as if run one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

DEFAULT_TOL = 1e-8
DEFAULT_MAX_ITER = 10_000


@dataclass(frozen=True)
class EMResult:
    """theta: (G, K) estimates; iterations: per group; converged: per group (False if
    the iteration cap was hit). Groups without counts keep their start value and are
    flagged in ``empty``. ``loglik`` is filled only when tracing (tests)."""

    theta: FloatArray
    iterations: NDArray[np.int64]
    converged: NDArray[np.bool_]
    empty: NDArray[np.bool_]
    loglik: list[FloatArray] = field(default_factory=list)


def _forward(P: FloatArray, theta: FloatArray) -> FloatArray:
    out = theta @ P.T if P.ndim == 2 else np.einsum("gjk,gk->gj", P, theta)
    return np.asarray(out, dtype=np.float64)


def _backward(P: FloatArray, ratio: FloatArray) -> FloatArray:
    out = ratio @ P if P.ndim == 2 else np.einsum("gj,gjk->gk", ratio, P)
    return np.asarray(out, dtype=np.float64)


#: share of the uniform distribution mixed into a warm start, so that no state starts at 0
#: (EM's multiplicative update can never revive a zero) or crawls back from near 0
WARM_START_MIX = 1e-3


def warm_start(previous: object, shape: tuple[int, int]) -> FloatArray | None:
    """Start point from a previous fit (an Estimate with ``latent``, or an array).

    Returns None when there is nothing usable (no latent, wrong shape, non-finite), so
    the caller falls back to the uniform start; otherwise (1 - mix) * previous + mix *
    uniform, row-normalised.
    """
    latent = getattr(previous, "latent", previous)
    if latent is None:
        return None
    prev = np.asarray(latent, dtype=np.float64)
    if prev.shape != shape or not np.all(np.isfinite(prev)) or np.any(prev < 0):
        return None
    prev = prev / np.maximum(prev.sum(axis=-1, keepdims=True), 1e-300)
    return np.asarray((1.0 - WARM_START_MIX) * prev + WARM_START_MIX / shape[-1], dtype=np.float64)


@dataclass(frozen=True)
class EMOptions:
    """Options every ``em`` estimator takes: start point, tolerance, iteration cap."""

    theta0: FloatArray | None
    tol: float
    max_iter: int


def parse_em_options(options: dict[str, Any], shape: tuple[int, int]) -> EMOptions:
    """Pop ``tol``, ``max_iter`` and ``warm_start`` from ``options``; anything else is an error."""
    tol = float(options.pop("tol", DEFAULT_TOL))
    max_iter = int(options.pop("max_iter", DEFAULT_MAX_ITER))
    warm = options.pop("warm_start", None)
    if options:
        raise TypeError(f"estimator em takes tol, max_iter and warm_start, got {sorted(options)}")
    return EMOptions(None if warm is None else warm_start(warm, shape), tol, max_iter)


def log_likelihood(P: FloatArray, counts: FloatArray, theta: FloatArray) -> FloatArray:
    """sum_z c_z ln (P theta)_z per group (terms with c_z = 0 are 0)."""
    dist = _forward(P, theta)
    with np.errstate(divide="ignore"):
        logd = np.log(dist)
    return np.asarray(np.where(counts > 0, counts * logd, 0.0).sum(axis=1), dtype=np.float64)


def em_counts(
    P: FloatArray,
    counts: NDArray[np.floating] | NDArray[np.integer],
    theta0: FloatArray | None = None,
    tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER,
    trace: bool = False,
) -> EMResult:
    """Run EM for every row of ``counts`` (G, J) under ``P`` (J, K) or per-group (G, J, K)."""
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError("counts must be a (groups, outputs) matrix")
    g, j = c.shape
    k = P.shape[-1]
    if P.shape[-2] != j or (P.ndim == 3 and P.shape[0] != g):
        raise ValueError(f"likelihood shape {P.shape} does not fit counts {c.shape}")
    if theta0 is None:
        theta = np.full((g, k), 1.0 / k)
    else:
        theta = np.array(theta0, dtype=np.float64, copy=True)
        if theta.shape != (g, k) or np.any(~np.isfinite(theta)) or np.any(theta < 0):
            raise ValueError("theta0 must be a finite, non-negative (groups, states) matrix")
        theta /= theta.sum(axis=1, keepdims=True)
    total = c.sum(axis=1)
    empty = total <= 0
    active = ~empty
    iterations = np.zeros(g, dtype=np.int64)
    lls: list[FloatArray] = []
    if trace:
        lls.append(log_likelihood(P, c, theta))
    for _ in range(max_iter):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        th = theta[idx]
        cg = c[idx]
        pg = P if P.ndim == 2 else P[idx]
        dist = _forward(pg, th)
        ratio = np.divide(cg, dist, out=np.zeros_like(cg), where=cg > 0)
        new = th * _backward(pg, ratio) / total[idx, None]
        delta = np.abs(new - th).max(axis=1)
        theta[idx] = new
        iterations[idx] += 1
        active[idx[delta <= tol]] = False
        if trace:
            lls.append(log_likelihood(P, c, theta))
    return EMResult(theta=theta, iterations=iterations, converged=~active, empty=empty, loglik=lls)
