"""The count-based EM solver: EM's fixed point for many independent groups at once.

:func:`em_counts` solves each group by active-set Newton (:mod:`~kvldp.common.estimation.em.newton`),
retries a warm start that does not pay off from the uniform point, and hands the groups
whose answer depends on EM's path to plain EM (:mod:`~kvldp.common.estimation.em.plain`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvldp.common.estimation.em.likelihood import FloatArray, IntArray, log_likelihood
from kvldp.common.estimation.em.newton import active_set_newton
from kvldp.common.estimation.em.options import DEFAULT_MAX_ITER, DEFAULT_TOL, WARM_START_MIX
from kvldp.common.estimation.em.plain import plain_em

#: Newton iterations from a warm start before the group is solved again from the uniform
#: point: a good warm start converges in 1-3, a poor one (tiny mass on many states that
#: the previous fit had at 0) can crawl for the whole budget, each iteration a dense solve
WARM_NEWTON_ITER = 12


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


def em_counts(
    P: FloatArray,
    counts: NDArray[np.floating] | NDArray[np.integer],
    theta0: FloatArray | None = None,
    tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER,
    trace: bool = False,
) -> EMResult:
    """EM's fixed point for every row of ``counts`` (G, J) under ``P`` (J, K) or per-group (G, J, K).

    Each group is first solved by safeguarded active-set Newton (:func:`active_set_newton`).
    It stops when both the Newton step (the distance to the MLE, to second order) and the
    EM step max |theta_t+1 - theta_t| (the KKT residual, and plain EM's own criterion) are
    at most ``tol``. EM's criterion alone is fooled where EM crawls: a step of 1e-8 can
    leave a boundary state 1e-4 away from 0. A ``tol`` finer than the arithmetic resolves
    is met to round-off (the Newton step stops shrinking below ROUNDOFF_STEP). Groups
    whose MLE is not unique (which Newton checks where it stops) or where Newton stalls are
    re-run with plain EM from ``theta0`` (:func:`plain_em`, bit for bit the textbook
    iteration), since there EM's answer depends on its path. States that are 0 in
    ``theta0`` stay 0 in both (EM never revives a zero), so the result is EM's fixed point
    in every case.

    ``iterations`` counts Newton iterations, or EM iterations for re-run groups; ``converged``
    is False where ``max_iter`` was reached first. With ``trace``, ``loglik`` holds the
    log-likelihood of every group after each iteration (a group's last value repeats once
    it stops; a re-run group shows its EM path); it never decreases (beyond round-off).
    """
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError("counts must be a (groups, outputs) matrix")
    g, j = c.shape
    k = P.shape[-1]
    if P.shape[-2] != j or (P.ndim == 3 and P.shape[0] != g):
        raise ValueError(f"likelihood shape {P.shape} does not fit counts {c.shape}")
    if theta0 is None:
        start = np.full((g, k), 1.0 / k)
    else:
        start = np.array(theta0, dtype=np.float64, copy=True)
        if start.shape != (g, k) or np.any(~np.isfinite(start)) or np.any(start < 0):
            raise ValueError("theta0 must be a finite, non-negative (groups, states) matrix")
        start /= start.sum(axis=1, keepdims=True)
    total = c.sum(axis=1)
    empty = total <= 0
    newton_lls: list[FloatArray] | None = [log_likelihood(P, c, start)] if trace else None
    # a warm start that does not pay off within a few Newton iterations is dropped (below)
    budget = max_iter if theta0 is None else min(max_iter, WARM_NEWTON_ITER)
    newton = active_set_newton(P, c, start, total, ~empty, tol, budget, newton_lls, _newton_start(start))
    theta, iterations, converged = newton.theta, newton.iterations, newton.converged
    unfinished = ~converged  # stalled or out of budget (done groups are converged)
    if theta0 is not None and unfinished.any():
        newton.rerun[unfinished] = True
        # a warm start puts tiny mass on every state the previous fit had at 0, and Newton
        # can crawl from there; a unique MLE does not depend on the start, so solve those
        # groups again from the uniform point of the same support (EM from theta0 reaches
        # the same point) before falling back to plain EM
        again = np.flatnonzero(unfinished)
        uniform = np.where(start[again] > 0, 1.0, 0.0)
        uniform /= uniform.sum(axis=1, keepdims=True)
        pa = P if P.ndim == 2 else P[again]
        retry = active_set_newton(pa, c[again], uniform, total[again], ~empty[again], tol, max_iter, None)
        solved = ~retry.rerun
        newton.rerun[again[solved]] = False
        theta[again[solved]] = retry.theta[solved]
        iterations[again[solved]] += retry.iterations[solved]
        converged[again[solved]] = retry.converged[solved]
    rerun = np.flatnonzero(newton.rerun)
    em_lls: list[FloatArray] | None = [] if trace else None
    if rerun.size:
        pr = P if P.ndim == 2 else P[rerun]
        em_theta, em_iter, em_conv = plain_em(pr, c[rerun], start[rerun], tol, max_iter, em_lls)
        theta[rerun] = em_theta
        iterations[rerun] = em_iter
        converged[rerun] = em_conv
    # one entry per iteration of the longest-running group (later ones would only repeat)
    lls = _merge_traces(newton_lls, em_lls, rerun)[: int(iterations.max(initial=0)) + 1] if trace else []
    return EMResult(theta=theta, iterations=iterations, converged=converged, empty=empty, loglik=lls)


def _newton_start(start: FloatArray) -> FloatArray:
    """Where Newton starts from a warm start: the previous fit itself.
    :func:`~kvldp.common.estimation.em.options.warm_start` mixes a little uniform mass into it so that
    EM, which never revives a zero, can reach every state; Newton frees any state of the
    support whose gradient points inward, so from tiny states it would only crawl back out
    (each iteration a dense solve over all of them). States at the mixed-in floor start at
    0 instead; the support, and so the answer, stay those of ``start``."""
    k = start.shape[1]
    floor = 2.0 * WARM_START_MIX / k
    first = np.where(start > floor, start, 0.0)
    total = first.sum(axis=1, keepdims=True)
    return np.where(total > 0, first / np.where(total > 0, total, 1.0), start)


def _merge_traces(
    newton: list[FloatArray] | None, em: list[FloatArray] | None, rerun: IntArray
) -> list[FloatArray]:
    """One log-likelihood trace per iteration: the EM path for re-run groups, Newton's else."""
    assert newton is not None and em is not None
    length = max(len(newton), len(em))
    out = []
    for t in range(length):
        row = newton[min(t, len(newton) - 1)].copy()
        if rerun.size:
            row[rerun] = em[min(t, len(em) - 1)]
        out.append(row)
    return out
