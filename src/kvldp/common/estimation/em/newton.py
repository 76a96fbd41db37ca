"""Safeguarded active-set Newton for the count MLE over the simplex, batched over groups
(docs/mechanisms.md, *EM by active-set Newton*).

The fast path of :func:`~kvldp.common.estimation.em.solve.em_counts`: it finds the maximiser of the
concave log-likelihood by the KKT conditions in a handful of iterations where EM crawls,
and reports which groups it could not settle (MLE not unique, stalled, out of budget) so
that the caller re-runs them with plain EM (:mod:`~kvldp.common.estimation.em.plain`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvldp.common.estimation.em.likelihood import (
    BoolArray,
    FloatArray,
    IntArray,
    backward,
    forward,
    log_likelihood,
)

#: Newton iterations a group gets before it is handed to plain EM (4-12 are typical)
NEWTON_MAX_ITER = 100
#: iterations at a first-order stationary point with a Newton step still above tol after
#: which a group counts as stalled (a flat direction: its MLE is not a point)
NEWTON_STALL = 5
#: relative slack of the likelihood comparison between the Newton and the EM candidate:
#: at the optimum both differ by round-off, and the Newton point is the more accurate one
ROUNDOFF = 1e-13
#: Newton steps this small that no longer shrink are round-off (measured: 1e-16 to 5e-13,
#: the gradient's round-off times the inverse curvature); a group stops there when tol
#: asks for less than the arithmetic can resolve
ROUNDOFF_STEP = 1e-10
#: damped Newton steps tried when the full step loses to EM
DAMPING = (0.5, 0.25, 0.125, 1 / 16, 1 / 64)
#: ridge of the Newton system, relative to the largest curvature on the face: far below
#: any identifiable curvature (see UNIQUE_CURVATURE), it only keeps the system regular
RIDGE = 1e-12
#: relative curvature on the sum-zero directions below which the MLE is taken as not unique
UNIQUE_CURVATURE = 1e-10
#: zeros whose gradient gap 1 - w_k is this small count as possibly positive in that test
DEGENERATE_GAP = 1e-6
#: domains up to this many states are solved without gathering the free states first
COMPACT_ABOVE = 16


@dataclass(frozen=True)
class NewtonResult:
    """Where :func:`active_set_newton` left each group, and which groups it leaves to plain EM."""

    theta: FloatArray
    iterations: IntArray
    converged: BoolArray
    #: groups to re-run with plain EM (MLE not unique, Newton stalled or out of budget)
    rerun: BoolArray


def active_set_newton(
    P: FloatArray,
    c: FloatArray,
    start: FloatArray,
    total: FloatArray,
    active: BoolArray,
    tol: float,
    max_iter: int,
    lls: list[FloatArray] | None,
    first: FloatArray | None = None,
) -> NewtonResult:
    """Safeguarded active-set Newton for max L(theta) over the simplex, per group, over
    the support of ``start``, from ``first`` (default: ``start``).

    With w = P^T (c / P theta) / N (EM's multiplicative update; N w is the gradient of L),
    the KKT conditions of the MLE are w_k = 1 where theta_k > 0 and w_k <= 1 where
    theta_k = 0. Each iteration

    * frees the positive states and the zeros with w_k > 1 (the gradient points inward;
      never states outside the start's support, which EM could not reach either);
    * maximises the quadratic model of L on that face under sum(theta) = 1 (one bordered
      linear system per group, batched) and derives two feasible points from it
      (:func:`_model_points`): the Newton point, which can move many states to 0 at once,
      and the bounded active-set step;
    * keeps whichever of them and the plain EM step has the highest likelihood
      (:func:`_safeguard`). EM never lowers L, so neither does this, and far from the
      optimum, where the quadratic model is poor, the iteration is no worse than EM.

    Once the face is right the steps are Newton steps: quadratic convergence. A group
    stops when the Newton step and the EM step are both <= tol, or is handed to plain EM
    when it stalls (first-order stationary for NEWTON_STALL iterations while the Newton
    step stays above tol: a flat direction), runs out of NEWTON_MAX_ITER iterations, or
    stops at an MLE that is not unique.
    """
    g, k = start.shape
    theta = (start if first is None else first).copy()
    support = start > 0
    iterations = np.zeros(g, dtype=np.int64)
    stall = np.zeros(g, dtype=np.int64)
    last_step = np.full(g, np.inf)
    running = active.copy()
    done = np.zeros(g, dtype=bool)
    rerun = np.zeros(g, dtype=bool)
    budget = min(max_iter, NEWTON_MAX_ITER)
    for _ in range(budget):
        idx = np.flatnonzero(running)
        if idx.size == 0:
            break
        th, cg, n = theta[idx], c[idx], total[idx, None]
        pg = P if P.ndim == 2 else P[idx]
        w, q = _gradient(pg, cg, th, n)
        free = support[idx] & ((th > 0) | (w > 1.0))
        cols, valid = _compact(free)
        thc = _take(th, cols)
        x, y = _model_points(_curvature(pg, q, cols), _take(w - 1.0, cols), thc, valid, valid & (thc == 0))
        newton, bounded = _put(x, cols, k), _put(y, cols, k)
        step = np.abs(newton - th).max(axis=1)
        kkt = np.abs(th * (w - 1.0)).max(axis=1)
        em = th * w
        em /= em.sum(axis=1, keepdims=True)
        theta[idx] = _safeguard(pg, cg, th, newton, bounded, em)
        iterations[idx] += 1
        # tol met, or below the round-off floor: a step that no longer shrinks (quadratic
        # convergence halves it at least) once both it and the KKT residual are tiny
        floor = (step <= ROUNDOFF_STEP) & (kkt <= ROUNDOFF_STEP) & (step >= last_step[idx] / 2)
        finished = ((step <= tol) & (kkt <= tol)) | floor
        last_step[idx] = step
        # first-order stationary, yet the Newton step stays large: a flat direction
        stall[idx] = np.where(~finished & (kkt <= tol), stall[idx] + 1, 0)
        done[idx[finished]] = True
        rerun[idx[stall[idx] >= NEWTON_STALL]] = True
        running[idx[finished | (stall[idx] >= NEWTON_STALL)]] = False
        if lls is not None:
            lls.append(log_likelihood(P, c, theta))
    if budget < max_iter:
        rerun |= running  # out of Newton budget, not of iterations: let EM finish the job
    checked = np.flatnonzero(done)
    if checked.size:
        pg = P if P.ndim == 2 else P[checked]
        rerun[checked] = ~_unique_mle(pg, c[checked], theta[checked], total[checked, None], support[checked])
    converged = ~active | done
    return NewtonResult(theta=theta, iterations=iterations, converged=converged, rerun=rerun)


def _safeguard(
    pg: FloatArray, c: FloatArray, theta: FloatArray, newton: FloatArray, bounded: FloatArray, em: FloatArray
) -> FloatArray:
    """The next iterate: the candidate of highest likelihood.

    The Newton point wins ties within round-off (it is the more accurate); then the
    bounded step, then EM. Where EM still wins, damped Newton steps theta + a (newton -
    theta), a = 1/2 ... 1/64 (feasible: convex combinations), are tried as well. EM never
    lowers L, so neither does this.
    """
    l_em = _loglik(pg, c, em)
    l_bounded = _loglik(pg, c, bounded)
    use_bounded = l_bounded > l_em
    best_l = np.where(use_bounded, l_bounded, l_em)
    out = np.where(use_bounded[:, None], bounded, em)
    use_newton = _loglik(pg, c, newton) >= best_l - ROUNDOFF * np.abs(best_l)
    out[use_newton] = newton[use_newton]
    lost = np.flatnonzero(~use_newton & ~use_bounded)
    if lost.size == 0:
        return out
    pl = pg if pg.ndim == 2 else pg[lost]
    best, best_l = em[lost], l_em[lost]
    for a in DAMPING:
        trial = theta[lost] + a * (newton[lost] - theta[lost])
        l_trial = _loglik(pl, c[lost], trial)
        better = l_trial > best_l
        best = np.where(better[:, None], trial, best)
        best_l = np.where(better, l_trial, best_l)
    out[lost] = best
    return out


def _gradient(
    pg: FloatArray, c: FloatArray, theta: FloatArray, n: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """w = P^T (c / pi) / N and the weights c / (N pi^2) of the curvature P^T diag(.) P."""
    pi = forward(pg, theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(c > 0, c / pi, 0.0)
        q = np.where(c > 0, r / (pi * n), 0.0)
    return backward(pg, r) / n, q


def _loglik(pg: FloatArray, c: FloatArray, theta: FloatArray) -> FloatArray:
    """L(theta) per group; -inf (never NaN) where a positive count gets probability 0."""
    pi = forward(pg, theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(c > 0, c * np.log(np.maximum(pi, 0.0)), 0.0)
    return np.asarray(terms.sum(axis=1), dtype=np.float64)


def _compact(mask: BoolArray) -> tuple[IntArray | None, BoolArray]:
    """Columns that put each row's True entries first, cut to the widest row (None: all).

    Newton's linear algebra is cubic in the number of states; at the MLE most states of a
    large domain (an item oracle over d + 1 items) are 0, so the systems are solved only on
    the free states. Small domains are not worth the gather.
    """
    k = mask.shape[1]
    m = int(mask.sum(axis=1).max(initial=0))
    if k <= COMPACT_ABOVE or m == k:
        return None, mask
    cols = np.argsort(~mask, axis=1, kind="stable")[:, : max(m, 1)]
    return cols.astype(np.int64), np.take_along_axis(mask, cols, axis=1)


def _take(x: FloatArray, cols: IntArray | None) -> FloatArray:
    return x if cols is None else np.take_along_axis(x, cols, axis=-1)


def _put(x: FloatArray, cols: IntArray | None, k: int) -> FloatArray:
    if cols is None:
        return x
    out = np.zeros((x.shape[0], k))
    np.put_along_axis(out, cols, x, axis=1)
    return out


def _take_square(a: FloatArray, cols: IntArray | None) -> FloatArray:
    if cols is None:
        return a
    return np.asarray(a[np.arange(a.shape[0])[:, None, None], cols[:, :, None], cols[:, None, :]])


def _curvature(pg: FloatArray, q: FloatArray, cols: IntArray | None) -> FloatArray:
    """-Hessian of L / N on the columns ``cols``: P^T diag(c / (N pi^2)) P, (G, m, m).

    Formed as B B^T with B = P^T diag(sqrt(.)), which BLAS computes as a symmetric rank-k
    update: half the work of a general product, and exactly symmetric.
    """
    if pg.ndim == 2:
        pt = pg.T[None, :, :] if cols is None else pg.T[cols]  # (G or 1, m, J)
    else:
        pt = np.swapaxes(pg if cols is None else np.take_along_axis(pg, cols[:, None, :], axis=2), 1, 2)
    b = pt * np.sqrt(q)[:, None, :]
    return np.asarray(b @ np.swapaxes(b, 1, 2), dtype=np.float64)


def _model_points(
    a: FloatArray, grad: FloatArray, theta: FloatArray, free: BoolArray, released: BoolArray
) -> tuple[FloatArray, FloatArray]:
    """Two feasible points that raise the quadratic model theta + s -> grad.s - s.a.s / 2.

    Both start from the model's maximiser z on the face ``free`` under sum(s) = 0, after
    returning to 0 the ``released`` zeros that z would make negative.

    * The Newton point: drop every state z makes negative and solve again, until none is
      (one pass per drop at most; two or three in practice). It reaches a distant face in
      one iteration — where most states of a large domain end at 0 — but it is not the
      model's constrained maximiser, and a nearly flat likelihood can send it astray.
    * The bounded step: theta + alpha (z - theta) up to the first state that reaches 0
      (set to exactly 0), the classical active-set step. It always raises the model, and it
      is what makes progress where the Newton point does not.
    """
    z = _model_point(a, grad, theta, free)
    back = released & (z < 0)
    if back.any():
        free = free & ~back
        z = _model_point(a, grad, theta, free)
    d = z - theta
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(free & (d < 0), theta / -d, np.inf)
    alpha = np.minimum(ratio.min(axis=1, initial=np.inf), 1.0)[:, None]
    bounded = np.where(free & (ratio <= alpha), 0.0, np.maximum(theta + alpha * d, 0.0))
    x = z
    for _ in range(free.shape[1]):
        negative = free & (x < 0)
        if not negative.any():
            break
        free = free & ~negative
        x = _model_point(a, grad, theta, free)
    x = np.maximum(x, 0.0)
    return (
        np.asarray(x / x.sum(axis=1, keepdims=True), dtype=np.float64),
        np.asarray(bounded / bounded.sum(axis=1, keepdims=True), dtype=np.float64),
    )


def _model_point(a: FloatArray, grad: FloatArray, theta: FloatArray, free: BoolArray) -> FloatArray:
    """theta + s with s_k = -theta_k off ``free`` and, on it, the solution of

    (a + ridge I) s + mu 1 = grad,  sum(s) = 0

    (the ridge keeps the bordered system regular when the model is not identifiable; the
    right-hand side has no component along a's null space, so the step has none either).
    """
    zeroed = np.where(free, 0.0, theta)
    rhs_top = grad + (a @ zeroed[:, :, None])[:, :, 0] if zeroed.any() else grad
    cols, valid = _compact(free)
    a_f, rhs_f, th_f = _take_square(a, cols), _take(rhs_top, cols), _take(theta, cols)
    g, m = th_f.shape
    diag = np.einsum("gkk->gk", a_f)
    scale = np.maximum(np.where(valid, diag, 0.0).max(axis=1), 1e-300)
    system = np.zeros((g, m + 1, m + 1))
    if valid.all():  # the common case of one large group: skip the masks
        system[:, :m, :m] = a_f
    else:
        system[:, :m, :m] = np.where(valid[:, :, None] & valid[:, None, :], a_f, 0.0)
    system[:, np.arange(m), np.arange(m)] += np.where(valid, RIDGE * scale[:, None], 1.0)
    system[:, :m, m] = np.where(valid, scale[:, None], 0.0)
    system[:, m, :m] = system[:, :m, m]
    rhs = np.zeros((g, m + 1))
    rhs[:, :m] = np.where(valid, rhs_f, 0.0)
    rhs[:, m] = scale * zeroed.sum(axis=1)
    try:
        s = np.linalg.solve(system, rhs[:, :, None])[:, :m, 0]
    except np.linalg.LinAlgError:  # not expected (the ridge), but a group must not sink the batch
        s = np.stack([_solve_alone(sy, r) for sy, r in zip(system, rhs, strict=True)])[:, :m]
    return _put(np.where(valid, th_f + s, 0.0), cols, theta.shape[1])


def _solve_alone(system: FloatArray, rhs: FloatArray) -> FloatArray:
    """One group's bordered system, as the batched solve would give it (least squares where
    it is singular): a singular group changes no other group's answer."""
    try:
        return np.asarray(np.linalg.solve(system, rhs), dtype=np.float64)
    except np.linalg.LinAlgError:
        return np.asarray(np.linalg.pinv(system) @ rhs, dtype=np.float64)


def _unique_mle(
    pg: FloatArray, c: FloatArray, theta: FloatArray, n: FloatArray, support: BoolArray
) -> BoolArray:
    """Whether the maximiser found is the only one (on the face EM can reach from theta0).

    L is strictly concave in the probabilities of the observed outputs, so every MLE has
    the same P theta on them and the MLEs form {theta: P_obs theta = P_obs theta_hat}. Moving
    mass into a state k with theta_k = 0 and w_k < 1 lowers L to first order, so the MLE is
    unique iff the curvature P_obs^T diag(c / pi^2) P_obs is positive definite on the
    sum-zero directions of the remaining states (the positive ones and the zeros whose gap
    1 - w_k is within ``DEGENERATE_GAP``). Identifiable mechanisms have a relative
    curvature of 3e-4 or more there; rank-deficient ones have round-off (1e-16).
    """
    w, q = _gradient(pg, c, theta, n)
    face = support & ((theta > 0) | (w >= 1.0 - DEGENERATE_GAP))
    cols, valid = _compact(face)
    a = _curvature(pg, q, cols)
    m = valid.sum(axis=1)[:, None, None].astype(np.float64)
    both = valid[:, :, None] & valid[:, None, :]
    a = np.where(both, a, 0.0)
    scale = np.maximum(np.einsum("gkk->gk", a).max(axis=1), 1e-300)[:, None, None]
    # project onto sum(s) = 0 within the face, then give the direction of ones a curvature
    # of `scale` so that only the sum-zero directions can fail the test
    row = a.sum(axis=2, keepdims=True) / m
    col = a.sum(axis=1, keepdims=True) / m
    total = a.sum(axis=(1, 2), keepdims=True) / (m * m)
    ones = np.where(both, 1.0, 0.0)
    proj = np.where(both, a - row - col + total, 0.0) + ones * scale / m
    idx = np.arange(a.shape[1])
    proj[:, idx, idx] += np.where(valid, 0.0, scale[:, :, 0])
    shifted = proj - UNIQUE_CURVATURE * scale * np.eye(a.shape[1])
    try:
        np.linalg.cholesky(shifted)
        return np.ones(theta.shape[0], dtype=bool)
    except np.linalg.LinAlgError:
        pass
    # some group fails: each is decided as it would be alone, whatever the other groups of
    # the call: by its smallest eigenvalue, unless Cholesky accepts it on its own. That takes
    # an eigenvalue within Cholesky's backward error of 0, m(m+1) eps/2 ||A|| (Higham 2002,
    # ch. 10), plus the eigensolver's: only groups within twice that are tried alone
    eig = np.linalg.eigvalsh(shifted)
    unique = eig[:, 0] > 0
    band = 2.0 * (a.shape[1] + 1) ** 2 * np.finfo(np.float64).eps * np.abs(eig).max(axis=1)
    for g in np.flatnonzero(~unique & (eig[:, 0] > -band)):
        unique[g] = _cholesky_accepts(shifted[g])
    return np.asarray(unique, dtype=np.bool_)


def _cholesky_accepts(a: FloatArray) -> bool:
    try:
        np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        return False
    return True
