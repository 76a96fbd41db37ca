"""Count-based maximum likelihood (kvldp.common.estimation.em): the accelerated solver returns EM's fixed point.

The reference is plain EM written out here (docs/mechanisms.md, *Count EM*), independent of
the library, run
to tol 1e-13. Where EM is still moving when it stops, its distance to its own limit is
estimated a posteriori: with the last two steps d_T and d_T-1 and the contraction rate
r = d_T / d_T-1, the remaining path is at most d_T r / (1 - r) (geometric tail). The
library's answer must lie within ten times that, plus ``tol``, of the reference; and, since
the log-likelihood is concave, the KKT conditions at the library's answer certify on their
own that it is the maximum (w_k = 1 on positive states, w_k <= 1 on zeros, with w the EM
multiplier P^T (c / P theta) / N, i.e. the gradient divided by N).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import kvldp.common.mechanisms.itemoracle as itemoracle
import kvldp.common.mechanisms.keysampled as keysampled
import kvldp.common.mechanisms.pckv_estimate as pckv
import kvldp.common.mechanisms.privkv as privkv
import kvldp.common.mechanisms.privkvm_estimate as privkvm
from kvldp.common.estimation import em
from kvldp.common.estimation.em import EMResult, em_counts
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.privkv import em4_transition
from kvldp.sim.datasets import generate

FloatArray = NDArray[np.float64]

#: the library's default stopping tolerance, within which its answer is promised
TOL = em.DEFAULT_TOL


# --------------------------------------------------------------------------- reference
@dataclass
class Reference:
    theta: FloatArray
    iterations: NDArray[np.int64]
    #: a-posteriori bound on the distance to EM's limit (0 where EM stopped exactly)
    tail: FloatArray


def forward(P: FloatArray, theta: FloatArray) -> FloatArray:
    if P.ndim == 2:
        return np.asarray(theta @ P.T, dtype=np.float64)
    return np.asarray(np.einsum("gjk,gk->gj", P, theta), dtype=np.float64)


def multiplier(P: FloatArray, c: FloatArray, theta: FloatArray) -> FloatArray:
    """w = P^T (c / P theta) / N: EM's update factor, the gradient of L divided by N."""
    pi = forward(P, theta)
    r = np.divide(c, pi, out=np.zeros_like(c), where=c > 0)
    back = r @ P if P.ndim == 2 else np.einsum("gj,gjk->gk", r, P)
    return np.asarray(back / c.sum(axis=1, keepdims=True), dtype=np.float64)


def loglik(P: FloatArray, c: FloatArray, theta: FloatArray) -> FloatArray:
    pi = forward(P, theta)
    with np.errstate(divide="ignore"):
        return np.asarray(np.where(c > 0, c * np.log(pi), 0.0).sum(axis=1), dtype=np.float64)


def reference_em(
    P: FloatArray,
    counts: FloatArray,
    theta0: FloatArray | None = None,
    tol: float = 1e-13,
    max_iter: int = 30_000,
) -> Reference:
    """Plain EM, every group stopping on max |theta_t+1 - theta_t| <= tol."""
    c = np.asarray(counts, dtype=np.float64)
    g, k = c.shape[0], P.shape[-1]
    theta = np.full((g, k), 1.0 / k) if theta0 is None else theta0 / theta0.sum(axis=1, keepdims=True)
    theta = np.array(theta, dtype=np.float64)
    step = np.full(g, np.inf)
    previous = np.full(g, np.inf)
    iterations = np.zeros(g, dtype=np.int64)
    ids = np.flatnonzero(c.sum(axis=1) > 0)
    for _ in range(max_iter):
        if ids.size == 0:
            break
        sub = theta[ids]
        new = sub * multiplier(P if P.ndim == 2 else P[ids], c[ids], sub)
        delta = np.abs(new - sub).max(axis=1)
        theta[ids] = new
        previous[ids] = step[ids]
        step[ids] = delta
        iterations[ids] += 1
        ids = ids[delta > tol]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.clip(step / previous, 0.0, 1.0)
        tail = np.where(step == 0, 0.0, step * rate / (1.0 - rate))
    return Reference(theta, iterations, np.nan_to_num(tail, nan=np.inf, posinf=np.inf))


# --------------------------------------------------------------------------- checks
def assert_kkt(P: FloatArray, c: FloatArray, theta: FloatArray, atol: float = 1e-9) -> None:
    """The MLE's optimality conditions, on the groups with data."""
    rows = c.sum(axis=1) > 0
    w = multiplier(P if P.ndim == 2 else P[rows], c[rows], theta[rows])
    positive = theta[rows] > 0
    assert np.all(theta >= 0) and np.allclose(theta.sum(axis=1), 1.0, atol=1e-12)
    assert np.abs(np.where(positive, w - 1.0, 0.0)).max() <= atol
    assert np.where(positive, -np.inf, w - 1.0).max() <= atol


def assert_is_em_fixed_point(
    P: FloatArray, c: FloatArray, res: EMResult, ref: Reference, tol: float = TOL
) -> None:
    """Within tol (the library's promise) plus 10x the reference's own remaining path.

    Plain EM from the uniform start crawls where the MLE is on the boundary (the vanishing
    states decay at rate w_k, close to 1), so some references end far from their limit and
    only bound the answer loosely. Hence a second reference: plain EM started on the face
    the answer chose (uniform over its positive states; EM keeps the others at 0). There
    the MLE is interior, EM converges linearly, and its tail is small: the answer must be
    that face's EM fixed point, and KKT (checked separately) says the face is the right one.
    """
    gap = np.abs(res.theta - ref.theta).max(axis=1)
    bound = 10.0 * ref.tail + tol
    assert np.all(gap <= bound), (gap.max(), np.flatnonzero(gap > bound))
    face = reference_em(P, c, (res.theta > 0).astype(np.float64))
    gap = np.abs(res.theta - face.theta).max(axis=1)
    bound = 10.0 * face.tail + tol
    assert np.all(gap <= bound), (gap.max(), np.flatnonzero(gap > bound))
    # the comparison has teeth: for most groups one reference did finish, so there the
    # answer is EM's limit to 1e-8 (measured: 50-100% of groups, 69% for PrivKVM, whose
    # MLEs sit close to the boundary)
    tight = (ref.tail <= 1e-9) | (face.tail <= 1e-9)
    assert np.mean(tight) >= 0.5, (np.sort(ref.tail), np.sort(face.tail))
    # the MLE: never below either reference, however far they got
    l_fast = loglik(P, c, res.theta)
    for other in (ref.theta, face.theta):
        l_ref = loglik(P, c, other)
        assert np.all(l_fast >= l_ref - 1e-12 * np.abs(l_ref))


def random_problem(
    rng: np.random.Generator, groups: int, outputs: int, states: int, per_group: bool, n: int = 3000
) -> tuple[FloatArray, FloatArray]:
    """LDP-like likelihoods (a random matrix mixed into the uniform one) and multinomial
    counts from a truth with zeros, so that many MLEs lie on the boundary."""
    shape = (groups, outputs, states) if per_group else (outputs, states)
    raw = rng.random(shape) ** 3
    P = 0.5 / outputs + 0.5 * raw / raw.sum(axis=-2, keepdims=True)
    truth = rng.random((groups, states)) * (rng.random((groups, states)) < 0.6)
    truth[:, 0] += 1e-3
    truth /= truth.sum(axis=1, keepdims=True)
    pi = forward(P, truth)
    counts = np.stack([rng.multinomial(n, p / p.sum()) for p in pi]).astype(np.float64)
    return P, counts


# --------------------------------------------------------------------------- generic P
@pytest.mark.parametrize(
    ("outputs", "states", "per_group"),
    [
        (3, 3, False),
        (8, 3, False),
        (6, 4, False),
        (5, 5, True),
        (30, 3, True),
        (48, 24, False),
        (40, 20, True),
    ],
)
def test_fixed_point_of_plain_em_on_random_problems(outputs: int, states: int, per_group: bool) -> None:
    rng = np.random.default_rng(100 + outputs * states)
    groups = 2 if states > 16 else 40
    P, c = random_problem(rng, groups, outputs, states, per_group)
    res = em_counts(P, c)
    ref = reference_em(P, c)
    assert res.converged.all()
    assert np.any(res.theta == 0)  # boundary MLEs: the case plain EM crawls on
    assert_kkt(P, c, res.theta)
    assert_is_em_fixed_point(P, c, res, ref)
    # and never below plain EM stopped by the library's old rule at its cap
    capped = reference_em(P, c, tol=TOL, max_iter=em.DEFAULT_MAX_ITER)
    assert np.all(
        loglik(P, c, res.theta) >= loglik(P, c, capped.theta) - 1e-12 * np.abs(loglik(P, c, capped.theta))
    )


def test_square_invertible_interior_is_the_linear_solution() -> None:
    """docs/mechanisms.md, *Count EM*: P^-1 c / N when it lies inside the simplex."""
    rng = np.random.default_rng(7)
    P = 0.6 * np.eye(4) + 0.1
    theta = rng.dirichlet(np.ones(4) * 5, size=30)
    c = np.round(forward(P, theta) * 1e6)
    linear = np.linalg.solve(P, (c / c.sum(axis=1, keepdims=True)).T).T
    assert np.all(linear > 0)
    res = em_counts(P, c)
    np.testing.assert_allclose(res.theta, linear, atol=1e-12)
    assert res.iterations.max() <= 10


def test_a_tolerance_below_round_off_is_met_to_round_off() -> None:
    """tol = 0 cannot be met literally; the Newton iteration stops where its step stops
    shrinking at round-off, and the answer is the MLE to that precision."""
    rng = np.random.default_rng(8)
    P, c = random_problem(rng, 40, 30, 3, True)
    exact = em_counts(P, c, tol=0.0)
    assert exact.converged.all() and exact.iterations.max() <= 20
    assert_kkt(P, c, exact.theta, atol=1e-13)
    np.testing.assert_allclose(exact.theta, em_counts(P, c).theta, atol=TOL)


def test_log_likelihood_trace_never_decreases() -> None:
    rng = np.random.default_rng(3)
    for outputs, states, per_group in ((3, 3, False), (8, 3, False), (9, 3, True), (3, 4, False)):
        P, c = random_problem(rng, 30, outputs, states, per_group, n=500)
        res = em_counts(P, c, trace=True)
        ll = np.array(res.loglik)
        assert ll.shape == (res.iterations.max() + 1, 30)
        assert np.all(np.diff(ll, axis=0) >= -1e-12 * np.abs(ll[1:]))
        np.testing.assert_allclose(ll[-1], loglik(P, c, res.theta), rtol=1e-14)


def assert_plain_em_where_not_unique(
    P: FloatArray, c: FloatArray, res: EMResult, theta0: FloatArray | None
) -> int:
    """Groups whose MLE is a set must get plain EM's answer exactly (same path, same start,
    same tol and cap); the others (boundary points can be unique even here) must be the
    unique MLE. Returns how many groups took the first branch."""
    path = reference_em(P, c, theta0, tol=TOL, max_iter=em.DEFAULT_MAX_ITER)
    same = np.abs(res.theta - path.theta).max(axis=1) <= 1e-13
    np.testing.assert_array_equal(res.iterations[same], path.iterations[same])
    if np.any(~same):
        other = np.flatnonzero(~same)
        sub = EMResult(res.theta[other], res.iterations[other], res.converged[other], res.empty[other])
        assert_kkt(P, c[other], res.theta[other])
        assert_is_em_fixed_point(
            P, c[other], sub, reference_em(P, c[other], None if theta0 is None else theta0[other])
        )
    return int(same.sum())


def test_models_without_a_unique_mle_return_plain_em() -> None:
    """J < K (or PrivKV's four-state model): the MLE is a set and EM's limit depends on its
    path, so the library must hand back what EM does, start point included."""
    rng = np.random.default_rng(5)
    P, c = random_problem(rng, 25, 3, 5, False, n=800)
    res = em_counts(P, c)
    assert assert_plain_em_where_not_unique(P, c, res, None) >= 15
    start = rng.dirichlet(np.ones(5), size=25)
    moved = em_counts(P, c, theta0=start)
    assert assert_plain_em_where_not_unique(P, c, moved, start) >= 15
    assert np.abs(moved.theta - res.theta).max() > 1e-3  # the start matters: not identified

    p4 = em4_transition(0.7, 0.8)
    c4 = rng.multinomial(4000, p4 @ [0.3, 0.1, 0.35, 0.25], size=10).astype(np.float64)
    assert assert_plain_em_where_not_unique(p4, c4, em_counts(p4, c4), None) == 10


def test_zero_start_states_stay_zero_as_in_em() -> None:
    """EM never revives a state that starts at 0; its limit is the MLE on that face."""
    rng = np.random.default_rng(9)
    P, c = random_problem(rng, 20, 6, 4, False)
    start = np.ones((20, 4))
    start[:10, 1] = 0.0
    res = em_counts(P, c, theta0=start)
    assert np.all(res.theta[:10, 1] == 0)
    assert_is_em_fixed_point(P, c, res, reference_em(P, c, start))


def test_warm_start_from_the_answer_converges_at_once() -> None:
    rng = np.random.default_rng(11)
    P, c = random_problem(rng, 40, 8, 3, False)
    cold = em_counts(P, c)
    warm = em_counts(P, c, theta0=em.warm_start(cold.theta, cold.theta.shape))
    assert warm.iterations.max() < cold.iterations.max()
    np.testing.assert_allclose(warm.theta, cold.theta, atol=TOL)


def test_warm_start_from_a_sparse_previous_fit_reaches_the_cold_answer_quickly() -> None:
    """The aggregator warm-starts every refit from the previous one. Over a large domain the
    previous MLE has many zeros, which the warm start lifts to a tiny floor; Newton must
    still find the same MLE, in a few iterations rather than its whole budget."""
    mech = create("hr", 300, 1.0)
    users = generate("uniform", 4_000, 300, 5).users
    rng = np.random.default_rng(6)
    previous = mech.collect(users.rows(0, 3_600), rng)
    stats = previous.merge(mech.collect(users.rows(3_600, 4_000), rng))
    prior = mech.estimate(previous, "em")
    assert np.sum(prior.latent == 0) > 10  # a sparse previous fit: the case that crawled
    cold = mech.estimate(stats, "em")
    warm = mech.estimate(stats, "em", warm_start=prior)
    assert warm.diagnostics["em_warm_start"] and warm.diagnostics["em_converged"]
    assert warm.diagnostics["em_iterations"] <= em.WARM_NEWTON_ITER
    np.testing.assert_allclose(warm.frequency, cold.frequency, atol=1e-10)


def test_empty_groups_and_iteration_cap() -> None:
    P = 0.5 * np.eye(3) + 0.5 / 3
    c = np.array([[0.0, 0.0, 0.0], [10.0, 3.0, 0.0], [5.0, 5.0, 5.0]])
    res = em_counts(P, c, max_iter=1)
    assert res.empty.tolist() == [True, False, False]
    np.testing.assert_allclose(res.theta[0], 1 / 3)
    assert res.iterations.tolist()[0] == 0 and res.iterations.max() == 1
    full = em_counts(P, c)
    assert full.converged.all() and full.iterations[0] == 0
    assert_kkt(P, c, full.theta)


def test_each_group_is_solved_as_if_it_were_alone() -> None:
    """Groups are independent: one call on many (a prediction stacks every key of every draw)
    gives each group what a call on it alone gives, iterations and uniqueness verdict
    included, with rank-deficient groups (no unique MLE: plain EM) and empty ones mixed in.
    Per-group likelihoods make every step's arithmetic per group; with one shared P only
    the matrix products' round-off may differ."""
    rng = np.random.default_rng(12)
    groups = 60
    P, c = random_problem(rng, groups, 4, 3, True, n=300)
    P[::6, :, 2] = P[::6, :, 1]  # two states with one column: their split is not identified
    c[5::17] = 0.0
    start = rng.dirichlet(np.ones(3), size=groups)
    for theta0 in (None, start):
        together = em_counts(P, c, theta0=theta0)
        for g in range(groups):
            alone = em_counts(
                P[g : g + 1], c[g : g + 1], theta0=None if theta0 is None else theta0[g : g + 1]
            )
            np.testing.assert_array_equal(alone.theta[0], together.theta[g])
            assert (alone.iterations[0], alone.converged[0]) == (
                together.iterations[g],
                together.converged[g],
            )
    shared, counts = random_problem(rng, groups, 4, 3, False, n=300)
    together = em_counts(shared, counts)
    for g in range(groups):
        alone = em_counts(shared, counts[g : g + 1])
        np.testing.assert_allclose(alone.theta[0], together.theta[g], rtol=0, atol=1e-14)
        assert alone.iterations[0] == together.iterations[g]


# --------------------------------------------------------------------------- mechanisms
EM_MODULES = (keysampled, privkv, pckv, itemoracle, privkvm)


@dataclass
class Call:
    P: FloatArray
    counts: FloatArray
    theta0: FloatArray | None
    result: EMResult


def capture(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """Record what every mechanism's EM estimator passes to em_counts, and gets back."""
    calls: list[Call] = []

    def spy(P: FloatArray, counts: Any, theta0: FloatArray | None = None, **kw: Any) -> EMResult:
        res = em_counts(P, counts, theta0=theta0, **kw)
        calls.append(Call(np.array(P), np.asarray(counts, dtype=np.float64), theta0, res))
        return res

    for module in EM_MODULES:
        monkeypatch.setattr(module, "em_counts", spy)
    return calls


@pytest.mark.parametrize(
    ("name", "estimator"),
    [
        ("kvue", "em"),
        ("kvoh", "em"),
        ("f2m", "em"),
        ("privkv", "em"),
        ("privkv", "em4"),
        ("pckv_ue", "em"),
        ("pckv_grr", "em"),
        ("privkvm", "em"),
        ("hr", "em"),
    ],
)
def test_mechanism_em_is_the_plain_em_fixed_point(
    name: str, estimator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = 16
    mech = create(name, d, 1.0)
    rng = np.random.default_rng(21)
    stats = mech.collect(generate("uniform", 12_000, d, 4).users, rng)
    calls = capture(monkeypatch)
    est = mech.estimate(stats, estimator)
    assert len(calls) == 1
    call = calls[0]
    res = call.result
    assert est.diagnostics["em_iterations"] == int(res.iterations.max())
    assert est.diagnostics.get("em_unconverged_keys", 0) == 0
    assert est.diagnostics.get("em_converged", True)
    if est.latent is not None:
        latent = est.latent.reshape(res.theta.shape)
        filled = ~res.empty
        np.testing.assert_array_equal(latent[filled], res.theta[filled])
    if estimator == "em4":  # not identified: plain EM's path where the MLE is a set
        assert assert_plain_em_where_not_unique(call.P, call.counts, res, call.theta0) >= 1
        return
    assert_is_em_fixed_point(call.P, call.counts, res, reference_em(call.P, call.counts, call.theta0))
    assert_kkt(call.P, call.counts, res.theta)
    assert np.any(res.theta == 0)  # the boundary case is exercised at this size


def test_sparse_counts_on_a_large_domain() -> None:
    """HR over 41 items with 30 reports: fewer observed outputs than states, on the solver's
    gathered (large-domain) path. The MLE here is sparse and still unique; either way the
    answer must be plain EM's where the MLE is a set and the unique MLE elsewhere."""
    mech = create("hr", 40, 1.0)
    stats = mech.collect(generate("uniform", 30, 40, 2).users, np.random.default_rng(3))
    assert isinstance(mech, itemoracle.ItemOracle)
    P = mech.transition()
    counts = mech.output_counts(stats.arrays)[None, :]
    assert np.count_nonzero(counts) < P.shape[1]
    res = em_counts(P, counts)
    assert res.converged.all() and np.count_nonzero(res.theta) < 10
    assert_plain_em_where_not_unique(P, counts, res, None)
