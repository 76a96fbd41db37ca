"""Count-based maximum likelihood (spec §0.5), vectorised over independent groups.

Every mechanism whose report is one symbol of a finite alphabet has a likelihood
``P[z | x]`` (J outputs x K latent inputs). The per-user EM of the papers depends on a
user only through its output symbol, so EM needs just the histogram of outputs — the
aggregator's statistics. Keys are independent problems with the same (or per-key) P;
they are solved together as the rows of one array, each stopping on its own criterion,
exactly as if run one by one.

Why :func:`em_counts` does not simply iterate EM. EM converges linearly at the rate of
the fraction of missing information, which under LDP noise is close to 1; and where the
MLE lies on the boundary of the simplex (typical for keys whose linear solution is
negative) the vanishing states decay only geometrically, at a rate that tends to 1 as
the gradient gap closes. At d = 1,000 keys most mechanisms hit the 10,000-iteration cap.
The log-likelihood L(theta) = sum_z c_z ln (P theta)_z is concave, so its maximiser over
the simplex is characterised by the KKT conditions and can be found by Newton's method
on the active face instead (:func:`_newton`, typically 4-12 iterations). (SQUAREM, the
usual EM accelerator, was measured too: at d = 1,000 it still hit the cap for PCKV-GRR
and PrivKVM, and where it stopped it was up to 1e-4 from the MLE.) That maximiser is
EM's fixed point whenever it is unique. When it is not (a rank-deficient model such as
PrivKV's four-state ``em4``, or too few distinct outputs) plain EM's limit depends on its
path from the start point, so those groups are re-run with plain EM from ``theta0``, and
the function keeps returning exactly what EM converges to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

DEFAULT_TOL = 1e-8
DEFAULT_MAX_ITER = 10_000

#: Newton iterations a group gets before it is handed to plain EM (4-12 are typical)
NEWTON_MAX_ITER = 100
#: Newton iterations from a warm start before the group is solved again from the uniform
#: point: a good warm start converges in 1-3, a poor one (tiny mass on many states that
#: the previous fit had at 0) can crawl for the whole budget, each iteration a dense solve
WARM_NEWTON_ITER = 12
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
#: EM iterations run between two evaluations of the stopping rule (see _plain_em)
EM_BLOCK = 8
#: domains up to this many states are solved without gathering the free states first
COMPACT_ABOVE = 16


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
    """EM's fixed point for every row of ``counts`` (G, J) under ``P`` (J, K) or per-group (G, J, K).

    Each group is first solved by safeguarded active-set Newton (:func:`_newton`). It
    stops when both the Newton step (the distance to the MLE, to second order) and the EM
    step max |theta_t+1 - theta_t| (the KKT residual, and plain EM's own criterion) are at
    most ``tol``. EM's criterion alone is fooled where EM crawls: a step of 1e-8 can leave
    a boundary state 1e-4 away from 0. A ``tol`` finer than the arithmetic resolves is met
    to round-off (the Newton step stops shrinking below ROUNDOFF_STEP). Groups whose MLE
    is not unique (:func:`_unique_mle`) or where Newton stalls are re-run with plain EM
    from ``theta0`` (:func:`_plain_em`, bit for bit the textbook iteration), since there
    EM's answer depends on its path. States that are 0 in ``theta0`` stay 0 in both (EM
    never revives a zero), so the result is EM's fixed point in every case.

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
    newton = _newton(P, c, start, total, ~empty, tol, budget, newton_lls, _newton_start(start))
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
        retry = _newton(pa, c[again], uniform, total[again], ~empty[again], tol, max_iter, None)
        solved = ~retry.rerun
        newton.rerun[again[solved]] = False
        theta[again[solved]] = retry.theta[solved]
        iterations[again[solved]] += retry.iterations[solved]
        converged[again[solved]] = retry.converged[solved]
    rerun = np.flatnonzero(newton.rerun)
    em_lls: list[FloatArray] | None = [] if trace else None
    if rerun.size:
        pr = P if P.ndim == 2 else P[rerun]
        em_theta, em_iter, em_conv = _plain_em(pr, c[rerun], start[rerun], tol, max_iter, em_lls)
        theta[rerun] = em_theta
        iterations[rerun] = em_iter
        converged[rerun] = em_conv
    # one entry per iteration of the longest-running group (later ones would only repeat)
    lls = _merge_traces(newton_lls, em_lls, rerun)[: int(iterations.max(initial=0)) + 1] if trace else []
    return EMResult(theta=theta, iterations=iterations, converged=converged, empty=empty, loglik=lls)


def _newton_start(start: FloatArray) -> FloatArray:
    """Where Newton starts from a warm start: the previous fit itself. :func:`warm_start`
    mixes a little uniform mass into it so that EM, which never revives a zero, can
    reach every state; Newton frees any state of the support whose gradient points
    inward, so from tiny states it would only crawl back out (each iteration a dense
    solve over all of them). States at the mixed-in floor start at 0 instead; the
    support, and so the answer, stay those of ``start``."""
    k = start.shape[1]
    floor = 2.0 * WARM_START_MIX / k
    first = np.where(start > floor, start, 0.0)
    total = first.sum(axis=1, keepdims=True)
    return np.where(total > 0, first / np.where(total > 0, total, 1.0), start)


@dataclass(frozen=True)
class _NewtonResult:
    theta: FloatArray
    iterations: IntArray
    converged: BoolArray
    #: groups to re-run with plain EM (MLE not unique, Newton stalled or out of budget)
    rerun: BoolArray


def _newton(
    P: FloatArray,
    c: FloatArray,
    start: FloatArray,
    total: FloatArray,
    active: BoolArray,
    tol: float,
    max_iter: int,
    lls: list[FloatArray] | None,
    first: FloatArray | None = None,
) -> _NewtonResult:
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
    return _NewtonResult(theta=theta, iterations=iterations, converged=converged, rerun=rerun)


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
    pi = _forward(pg, theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(c > 0, c / pi, 0.0)
        q = np.where(c > 0, r / (pi * n), 0.0)
    return _backward(pg, r) / n, q


def _loglik(pg: FloatArray, c: FloatArray, theta: FloatArray) -> FloatArray:
    """L(theta) per group; -inf (never NaN) where a positive count gets probability 0."""
    pi = _forward(pg, theta)
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
        s = (np.linalg.pinv(system) @ rhs[:, :, None])[:, :m, 0]
    return _put(np.where(valid, th_f + s, 0.0), cols, theta.shape[1])


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
        return np.asarray(np.linalg.eigvalsh(shifted)[:, 0] > 0, dtype=np.bool_)


def _plain_em(
    P: FloatArray, c: FloatArray, start: FloatArray, tol: float, max_iter: int, lls: list[FloatArray] | None
) -> tuple[FloatArray, IntArray, BoolArray]:
    """Plain EM (spec §0.5), each group stopping when max |theta_t+1 - theta_t| <= tol.

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
