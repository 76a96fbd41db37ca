"""Plain EM, the textbook multiplicative iteration, batched over groups.

:func:`~kvldp.common.estimation.em.solve.em_counts` runs it only for the groups whose answer is
EM's path (the MLE is not unique, or Newton could not settle them); there the result
must be what iterating EM from the start point gives, bit for bit.
"""

from __future__ import annotations

import numpy as np

from kvldp.common.estimation.em.likelihood import BoolArray, FloatArray, IntArray, log_likelihood
from kvldp.common.estimation.em.newton import COMPACT_ABOVE

#: EM iterations run between two evaluations of the stopping rule (see plain_em)
EM_BLOCK = 8


def plain_em(
    P: FloatArray, c: FloatArray, start: FloatArray, tol: float, max_iter: int, lls: list[FloatArray] | None
) -> tuple[FloatArray, IntArray, BoolArray]:
    """Plain EM (docs/mechanisms.md, *Count EM*), each group stopping when max |theta_t+1 - theta_t| <= tol.

    Only for groups whose answer is EM's path, which for a few of them runs to the cap, so
    the per-iteration overhead is what counts. The working arrays hold just the groups
    still running (compacted when one stops); the iterates of a block of EM_BLOCK
    iterations are kept and the stopping rule is evaluated on the whole block at once,
    each group taking the iterate at which it first holds (the few further iterations are
    discarded); where P has no zero the masked division is skipped (c_z / (P theta)_z is 0
    for c_z = 0 anyway). The arithmetic is the textbook update's, operation for operation,
    so the result is bit for bit the one of iterating and testing one step at a time.
    """
    theta = start.copy()
    g, k = theta.shape
    iterations = np.zeros(g, dtype=np.int64)
    converged = np.zeros(g, dtype=bool)
    ids = np.arange(g)
    positive = bool(np.all(P > 0))
    block = 1 if lls is not None else EM_BLOCK
    th, cg, pg = theta.copy(), c, P
    n = np.repeat(c.sum(axis=1)[:, None], k, axis=1)  # same-shape division is faster
    observed = cg > 0
    dist, ratio, back = np.empty_like(cg), np.zeros_like(cg), np.empty_like(th)
    if lls is not None:
        lls.append(log_likelihood(P, c, theta))
    t = 0
    while t < max_iter and ids.size:
        steps = min(block, max_iter - t)
        path = np.empty((steps + 1, ids.size, k))
        path[0] = th
        for b in range(steps):
            if pg.ndim == 2:
                np.matmul(path[b], pg.T, out=dist)
            else:
                np.einsum("gjk,gk->gj", pg, path[b], out=dist)
            if positive:
                np.divide(cg, dist, out=ratio)
            else:
                np.divide(cg, dist, out=ratio, where=observed)
            if pg.ndim == 2:
                np.matmul(ratio, pg, out=back)
            else:
                np.einsum("gj,gjk->gk", ratio, pg, out=back)
            np.multiply(path[b], back, out=path[b + 1])
            path[b + 1] /= n
            if lls is not None:
                theta[ids] = path[b + 1]
                lls.append(log_likelihood(P, c, theta))
        delta = np.subtract(path[1:], path[:-1])
        np.abs(delta, out=delta)
        hit = _row_max(delta) <= tol  # (steps, groups)
        th = path[steps]
        if hit.any():
            stop = np.flatnonzero(hit.any(axis=0))
            first = np.argmax(hit[:, stop], axis=0)
            theta[ids[stop]] = path[first + 1, stop]
            iterations[ids[stop]] = t + first + 1
            converged[ids[stop]] = True
            keep = np.ones(ids.size, dtype=bool)
            keep[stop] = False
            ids, th, cg, n, observed = ids[keep], th[keep], cg[keep], n[keep], observed[keep]
            pg = pg if pg.ndim == 2 else pg[keep]
            dist, ratio, back = np.empty_like(cg), np.zeros_like(cg), np.empty_like(th)
        t += steps
    iterations[ids] = max_iter
    theta[ids] = th
    return theta, iterations, converged


def _row_max(x: FloatArray) -> FloatArray:
    """x.max(axis=-1), as a running elementwise maximum over the states when they are few:
    numpy reduces along a short contiguous axis about ten times slower."""
    if x.shape[-1] > COMPACT_ABOVE:
        return np.asarray(x.max(axis=-1), dtype=np.float64)
    out = x[..., 0].copy()
    for col in range(1, x.shape[-1]):
        np.maximum(out, x[..., col], out=out)
    return np.asarray(out, dtype=np.float64)
