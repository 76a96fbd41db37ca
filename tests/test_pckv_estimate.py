"""PCKV's estimators and variances (docs/mechanisms.md, *PCKV estimators*, *PCKV variances*;
:mod:`kvldp.common.mechanisms.pckv_estimate`):
expected-count round trips, Algorithm 4's inverse and corrections, Monte-Carlo checks of
the analytic variances, EM and the normsub projection.

Statistical tests use fixed seeds and tolerances derived from the analytic variances:
means within 4 standard errors of the Monte-Carlo average (sd = sqrt(Var / R)), sample
variances within 15% of the formula (the sd of a variance ratio over R repeats is
sqrt(2 / R), so 15% is 4.7 sd at R = 2000 and 3.4 sd at R = 1000).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.em import em_counts
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.pckv import PCKV, PCKVGRR, PCKVUE

from support.pckv import MECHS, population


@pytest.fixture(autouse=True)
def _client_probabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    """These worked examples and folds check the client's p, q (a, b) exactly: the
    plausibility rule (docs/plausibility.md) refuses nothing here."""
    monkeypatch.setattr(Mechanism, "false_refusal_bound", 0.0)


# ---------------------------------------------------------------------- helpers
def tile(users: KVData, reps: int) -> KVData:
    """The population repeated ``reps`` times (one perturbation call for all repeats)."""
    n_pairs = users.keys.shape[0]
    ends = (users.indptr[None, 1:] + n_pairs * np.arange(reps)[:, None]).ravel()
    return KVData(users.d, np.r_[0, ends], np.tile(users.keys, reps), np.tile(users.values, reps))


def worked_population() -> KVData:
    """n = 100000, key 0 held by 20000 users (15000 at +1, 5000 at -1: f = 0.2, m = 0.5);
    60000 users hold one of keys 1..4, 20000 hold nothing — every user holds <= ell = 1 key."""
    keys = np.r_[np.zeros(20000, dtype=np.int64), np.arange(60000) % 4 + 1, -np.ones(20000, dtype=np.int64)]
    values = np.r_[np.ones(15000), -np.ones(5000), np.linspace(-1, 1, 60000), np.zeros(20000)]
    return KVData.from_single_key(5, keys, values)


def transcribed_theorem4(mech: PCKV, n: int, f: np.ndarray) -> np.ndarray:
    """Var[f^] as Theorem 4 was transcribed (docs/mechanisms.md, *PCKV variances*)."""
    a, b, ell = mech.a, mech.b, mech.ell
    return ell**2 * b * (1 - b) / (n * (a - b) ** 2) + ell * f * (1 - a - b) / (n * (a - b))


def repeated_estimates(
    mech: PCKV, users: KVData, reps: int, seed: int, estimator: str = "unbiased"
) -> tuple[np.ndarray, np.ndarray]:
    """(reps, d) frequencies and means, each repeat folded and estimated on its own."""
    batch = mech.perturb_many(tile(users, reps), np.random.default_rng(seed))
    n = users.n_users
    freqs, means = [], []
    for r in range(reps):
        stats = mech.new_stats().fold({k: v[r * n : (r + 1) * n] for k, v in batch.items()})
        est = mech.estimate(stats, estimator)
        freqs.append(est.frequency)
        means.append(est.mean)
    return np.array(freqs), np.array(means)


# ---------------------------------------------------------------------- worked numbers (docs/mechanisms.md, *PCKV worked numbers*)
def test_ue_round_trip_worked_numbers() -> None:
    """Expected counts (the expected-count round trip): E[n1], E[n2], then every estimator recovers f and m."""
    mech = PCKVUE(5, 1.0)
    users = worked_population()
    expected = mech.expected_stats(users)
    assert expected.arrays["n1"][0] == pytest.approx(20145.509255318782, rel=1e-9)
    assert expected.arrays["n2"][0] == pytest.approx(17834.923469018733, rel=1e-9)
    f_true, m_true = users.truth()
    for name in ("unbiased", "paper", "normsub"):
        est = mech.estimate(expected, name)
        np.testing.assert_allclose(est.frequency, f_true, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(est.mean, m_true, rtol=1e-9)
    est = mech.estimate(expected, "em", tol=1e-14, max_iter=100_000)
    assert est.diagnostics["em_unconverged_keys"] == 0
    np.testing.assert_allclose(est.frequency, f_true, rtol=1e-8)
    np.testing.assert_allclose(est.mean, m_true, rtol=1e-8)
    # Theorem 4 at ell = 1, evaluated at the estimate (f = 0.2, m = 0.5)
    est = mech.estimate(expected, "unbiased")
    assert est.frequency_stderr[0] ** 2 == pytest.approx(1.0274963852e-4, rel=1e-9)
    _, var_m = mech.variances(float(users.n_users), est.frequency, est.mean)
    assert var_m[0] == pytest.approx(2.3249951576e-3, rel=1e-9)
    # the exported one is the half-width of the Fieller interval over Z95: its first order
    # is the delta method's, and it is wider by O(Var D / D^2) (here 1.2%)
    assert est.mean_stderr[0] ** 2 == pytest.approx(2.3249951576e-3, rel=0.03)
    assert est.mean_stderr[0] ** 2 > 2.3249951576e-3


@pytest.mark.parametrize("cls", MECHS)
@pytest.mark.parametrize("ell", [1, 3])
def test_expected_count_round_trip(cls: type[PCKV], ell: int) -> None:
    """Truth is recovered exactly from expected counts when every user holds <= ell keys
    (enough users for every held key's mean to be estimable)."""
    groups: list[tuple[int, Mapping[int, float]]] = [
        (400, {0: 0.4}),
        (300, {1: -0.6}),
        (200, {}),
        (100, {3: -1.0}),
    ]
    if ell == 3:
        groups += [(300, {1: -0.6, 2: 0.2}), (100, {2: 1.0, 3: -1.0}), (150, {0: -0.3, 3: 0.8, 4: 0.1})]
    users = population(5, [(100 * count, pairs) for count, pairs in groups])
    f_true, m_true = users.truth()
    held = f_true > 0
    # count_floor = 0: no correction binds on exact expectations (m = -1 included)
    mech = cls(5, 1.5, ell=ell, count_floor=0)
    expected = mech.expected_stats(users)
    for name in ("unbiased", "paper", "normsub"):
        est = mech.estimate(expected, name)
        np.testing.assert_allclose(est.frequency[held], f_true[held], rtol=1e-9)
        np.testing.assert_allclose(est.mean[held], m_true[held], rtol=1e-9, atol=1e-12)


def test_users_with_more_than_ell_keys_are_undercounted() -> None:
    """The documented bias: a user with |S| > ell contributes ell/|S| of a holder."""
    users = population(4, [(500, {0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5}), (500, {})])
    for cls in MECHS:
        mech = cls(4, 2.0, ell=2)
        est = mech.estimate(mech.expected_stats(users), "unbiased")
        np.testing.assert_allclose(est.frequency, 0.5 * 2 / 4, rtol=1e-9)
        assert est.diagnostics["assumes"] == "every user holds at most ell keys"


# ---------------------------------------------------------------------- Algorithm 4
@pytest.mark.parametrize("cls", MECHS)
def test_algorithm4_closed_form_inverse(cls: type[PCKV]) -> None:
    rng = np.random.default_rng(11)
    mech = cls(30, 1.7, ell=2)
    n = 5000.0
    n1 = rng.integers(0, 2000, size=30).astype(np.float64)
    n2 = rng.integers(0, 2000, size=30).astype(np.float64)
    c1, c2 = mech.linear_counts(n, n1, n2)
    rhs = np.stack([n1 - n * mech.b / 2, n2 - n * mech.b / 2])
    solved = np.linalg.solve(mech.count_matrix(), rhs)
    np.testing.assert_allclose(c1, solved[0], rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(c2, solved[1], rtol=1e-10, atol=1e-8)
    # identities: the difference calibrates the value, the sum is n f / ell (baseline)
    np.testing.assert_allclose(c1 - c2, (n1 - n2) / (mech.a * (2 * mech.p - 1)), rtol=1e-10, atol=1e-8)
    f_raw = mech.estimate(
        Stats(mech, {"n1": n1.astype(np.int64), "n2": n2.astype(np.int64), "n": np.array([5000])}), "unbiased"
    ).frequency
    np.testing.assert_allclose(c1 + c2, n * f_raw / mech.ell, rtol=1e-10, atol=1e-8)


@pytest.mark.parametrize("floor", [0, 1])
def test_algorithm4_corrections(floor: int) -> None:
    """f corrected into [1/n, 1]; counts clipped into [floor, N] lower bound first."""
    mech = PCKVUE(4, 2.0, count_floor=floor)
    n = 10_000
    # calibrated counts (N+, N-) per key, mapped to observations by A (tested above):
    # key 0: nothing above the noise (f_raw < 0); key 1: N- < 0 (clipped to the floor);
    # key 2: interior; key 3: far more nonzero symbols than possible (f_raw > 1)
    latent = np.array([[-40.0, -40.0], [900.0, -60.0], [700.0, 300.0], [20_000.0, 20_000.0]])
    observed = latent @ mech.count_matrix().T + n * mech.b / 2
    n1, n2 = np.round(observed).astype(np.int64).T
    stats = Stats(mech, {"n1": n1, "n2": n2, "n": np.array([n])})
    paper = mech.estimate(stats, "paper")
    raw = mech.estimate(stats, "unbiased").frequency
    assert raw[0] < 0 and raw[3] > 1
    np.testing.assert_allclose(paper.frequency, np.clip(raw, 1 / n, 1), rtol=1e-12)
    assert np.all(np.abs(paper.mean[1:]) <= 1)
    assert paper.diagnostics["frequency_corrected"] == 2
    big_n = n * paper.frequency / mech.ell
    c1, c2 = mech.linear_counts(float(n), n1.astype(float), n2.astype(float))
    # key 0: f raised to 1/n, so N = 1/ell; the published mean is the clipping's artefact,
    # as in the authors' code: both counts end at N (floor 1) -> 0, or in [0, N] (floor 0)
    k0 = np.clip(np.array([c1[0], c2[0]]), floor, None).clip(None, big_n[0])
    assert paper.mean[0] == pytest.approx((k0[0] - k0[1]) / big_n[0], abs=1e-12)
    if floor == 1:
        assert paper.mean[0] == 0.0
    assert paper.diagnostics["undefined_means"] == 0
    # the data cannot estimate that mean (no significant holders): no standard error, no
    # interval, and the diagnostics count it as answered without information
    assert np.isnan(paper.mean_stderr[0]) and np.isnan(paper.mean_interval[0][0])
    assert paper.diagnostics["means_without_information"] == 1
    # key 3: f corrected down to 1, N = n/ell, both counts clipped to N
    assert paper.frequency[3] == 1.0 and paper.mean[3] == 0.0
    # key 1: N- < 0 goes up to the floor; N+ then exceeds N = N+ + N- and goes down to N
    assert c2[1] < 0 and c1[1] > big_n[1]
    assert paper.mean[1] == pytest.approx((big_n[1] - floor) / big_n[1], rel=1e-12)
    # key 2: no correction binds, the mean is the baseline ratio
    assert paper.mean[2] == pytest.approx((c1[2] - c2[2]) / big_n[2], rel=1e-12)
    assert paper.diagnostics["counts_clipped"] == 3
    # the unbiased estimator reports the raw frequency and the same Algorithm-4 mean, except
    # where the mean is not estimable: there it has none
    unbiased = mech.estimate(stats, "unbiased")
    np.testing.assert_array_equal(unbiased.mean[1:], paper.mean[1:])
    assert np.isnan(unbiased.mean[0]) and np.isnan(unbiased.mean_stderr[0])
    assert unbiased.diagnostics["undefined_means"] == unbiased.diagnostics["not_estimable_means"] == 1


# ---------------------------------------------------------------------- Monte Carlo
MC_ELL1: list[tuple[int, Mapping[int, float]]] = [(120, {0: 0.5}), (60, {1: -0.3}), (30, {2: 1.0}), (90, {})]
MC_ELL3: list[tuple[int, Mapping[int, float]]] = [
    (150, {0: 0.5, 1: -0.2, 2: 1.0}),
    (60, {0: 0.5, 3: -1.0}),
    (30, {3: -1.0}),
    (60, {}),
]


@pytest.mark.parametrize(
    ("cls", "ell", "eps", "seed"),
    [(PCKVUE, 1, 1.0, 1), (PCKVGRR, 1, 1.0, 2), (PCKVUE, 3, 4.0, 3), (PCKVGRR, 3, 4.0, 4)],
)
def test_frequency_unbiased_and_variance(cls: type[PCKV], ell: int, eps: float, seed: int) -> None:
    """R = 2000 collections of n = 300 users: mean error and variance of f^ against the
    exact variance. At ell = 3 (large eps, so the f-term matters) the transcribed Theorem 4
    is also checked and must be rejected: it lacks the (ell - 1) f / n term."""
    reps = 2000
    users = population(4, MC_ELL3 if ell == 3 else MC_ELL1)
    n = users.n_users
    f_true, m_true = users.truth()
    mech = cls(4, eps, ell=ell)
    freqs, _ = repeated_estimates(mech, users, reps, seed)
    var_f, _ = mech.variances(n, f_true, np.nan_to_num(m_true))
    # exact closed form of the analytic variance (derived in the module docstring)
    np.testing.assert_allclose(
        var_f, transcribed_theorem4(mech, n, f_true) + (ell - 1) * f_true / n, rtol=1e-10
    )
    err = freqs.mean(axis=0) - f_true
    assert np.all(np.abs(err) < 4 * np.sqrt(var_f / reps)), err / np.sqrt(var_f / reps)
    ratio = freqs.var(axis=0, ddof=1) / var_f
    assert np.all(np.abs(ratio - 1) < 0.15), ratio
    transcribed = freqs.var(axis=0, ddof=1) / transcribed_theorem4(mech, n, f_true)
    if ell == 1:
        np.testing.assert_allclose(transcribed, ratio, rtol=1e-12)
    else:
        held = f_true >= 0.5
        assert np.all(np.abs(transcribed[held] - 1) > 0.15), transcribed


@pytest.mark.parametrize(("cls", "seed"), [(PCKVUE, 5), (PCKVGRR, 6)])
def test_mean_variance(cls: type[PCKV], seed: int) -> None:
    """Algorithm-4 mean at ell = 3: variance against the delta method, bias against its
    second-order term m b(1-b-delta)/(n delta^2). The population keeps the denominator's
    coefficient of variation below 10%, so the neglected higher-order terms (relative order
    3 CV^2 < 3%) stay well inside the 15% band."""
    reps, ell, eps = 1000, 3, 4.0
    users = population(3, [(1800, {0: 0.5, 1: -0.2, 2: 0.3}), (1200, {})])
    n = users.n_users
    f_true, m_true = users.truth()
    mech = cls(3, eps, ell=ell)
    _, means = repeated_estimates(mech, users, reps, seed)
    _, var_m = mech.variances(n, f_true, m_true)
    delta = (mech.a - mech.b) * f_true / ell
    cov = mech.count_covariance(n, f_true, m_true)
    cv = np.sqrt(cov.sum(axis=(1, 2))) / (mech.a - mech.b) / (n * f_true / ell)
    assert np.all(cv < 0.1)
    bias = m_true * mech.b * (1 - mech.b - delta) / (n * delta**2)
    err = means.mean(axis=0) - m_true - bias
    assert np.all(np.abs(err) < 4 * np.sqrt(var_m / reps)), err / np.sqrt(var_m / reps)
    ratio = means.var(axis=0, ddof=1) / var_m
    assert np.all(np.abs(ratio - 1) < 0.15), ratio


# ---------------------------------------------------------------------- EM and normsub
@pytest.fixture(scope="module")
def interior_stats() -> tuple[PCKV, Stats, Stats]:
    """Two disjoint PCKV-UE collections (ell = 2) whose linear estimates are interior."""
    mech = PCKVUE(6, 2.0, ell=2)
    users = population(
        6,
        [
            (6000, {0: 0.3, 1: -0.5}),
            (4000, {2: 0.8}),
            (3000, {3: -0.1, 4: 0.6}),
            (3000, {5: 0.0}),
            (4000, {}),
        ],
    )
    rng = np.random.default_rng(21)
    return mech, mech.collect(users, rng), mech.collect(users, rng)


def test_em_monotone_simplex_and_linear(interior_stats: tuple[PCKV, Stats, Stats]) -> None:
    mech, stats, _ = interior_stats
    n = float(stats.n_reports)
    n1 = stats.arrays["n1"].astype(np.float64)
    n2 = stats.arrays["n2"].astype(np.float64)
    counts = np.stack([n1, n2, n - n1 - n2], axis=1)
    res = em_counts(mech.transition(), counts, tol=1e-10, trace=True)
    ll = np.array(res.loglik)
    assert np.all(np.diff(ll, axis=0) >= -1e-9 * np.abs(ll[1:]))
    assert np.all(res.theta >= 0)
    np.testing.assert_allclose(res.theta.sum(axis=1), 1.0, rtol=1e-12)
    c1, c2 = mech.linear_counts(n, n1, n2)
    assert np.all(c1 > 0) and np.all(c2 > 0) and np.all(c1 + c2 < n)  # interior: the test is meaningful
    em = mech.estimate(stats, "em", tol=1e-13, max_iter=100_000)
    unbiased = mech.estimate(stats, "unbiased")
    assert em.diagnostics["em_unconverged_keys"] == 0
    np.testing.assert_allclose(em.frequency, unbiased.frequency, rtol=1e-8)
    np.testing.assert_allclose(em.mean, unbiased.mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(em.frequency_stderr, unbiased.frequency_stderr, rtol=1e-6)
    assert em.latent is not None
    np.testing.assert_allclose(em.latent[:, 0] * n, c1, rtol=1e-8)


def test_em_warm_start(interior_stats: tuple[PCKV, Stats, Stats]) -> None:
    mech, first, second = interior_stats
    previous = mech.estimate(first, "em", tol=1e-10)
    merged = first.merge(second)
    cold = mech.estimate(merged, "em", tol=1e-10)
    warm = mech.estimate(merged, "em", tol=1e-10, warm_start=previous)
    assert warm.diagnostics["em_warm_start"] and not cold.diagnostics["em_warm_start"]
    assert warm.diagnostics["em_iterations"] < cold.diagnostics["em_iterations"]
    np.testing.assert_allclose(warm.frequency, cold.frequency, rtol=1e-6)
    np.testing.assert_allclose(warm.mean, cold.mean, rtol=1e-6, atol=1e-8)
    with pytest.raises(TypeError, match="em takes"):
        mech.estimate(merged, "em", tolerance=1e-3)
    with pytest.raises(TypeError, match="no options"):
        mech.estimate(merged, "paper", tol=1e-3)


def test_normsub_projection() -> None:
    """Negative shares are zeroed (mean NaN, counted) and the rest is consistent."""
    mech = PCKVGRR(5, 1.0, ell=2)
    users = population(5, [(3000, {0: 0.5, 1: -0.5}), (2000, {2: 0.9}), (5000, {})])
    stats = mech.collect(users, np.random.default_rng(31))
    arrays = {k: v.copy() for k, v in stats.arrays.items()}
    # key 4 (held by nobody): both symbols slightly below the non-holder level -> negative shares
    arrays["n1"][4] = arrays["n2"][4] = round(stats.n_reports * mech.b / 2) - 30
    stats = Stats(mech, arrays)
    n = float(stats.n_reports)
    c1, c2 = mech.linear_counts(n, arrays["n1"].astype(np.float64), arrays["n2"].astype(np.float64))
    assert c1[4] < 0 and c2[4] < 0 and np.all(c1[:4] > 0) and np.all(c2[:4] > 0)
    est = mech.estimate(stats, "normsub")
    assert np.all(est.frequency >= 0) and est.frequency.sum() / mech.ell <= 1 + 1e-12
    assert est.frequency[4] == 0 and np.isnan(est.mean[4]) and np.isnan(est.mean_stderr[4])
    # keys 3 and 4, held by nobody, have no estimable mean; the held keys have theirs
    assert est.diagnostics["undefined_means"] == est.diagnostics["not_estimable_means"] == 2
    assert np.all(np.abs(est.mean[:3]) <= 1)
    # the positive shares all move by one common amount tau: f drops by 2 ell tau
    unbiased = mech.estimate(stats, "unbiased")
    shift = (unbiased.frequency[:4] - est.frequency[:4]) / (2 * mech.ell)
    assert shift[0] > 0
    np.testing.assert_allclose(shift, shift[0], rtol=1e-9)


@pytest.mark.parametrize("cls", MECHS)
def test_no_reports_gives_nan(cls: type[PCKV]) -> None:
    mech = cls(3, 1.0)
    for name in mech.estimator_names:
        est = mech.estimate(mech.new_stats(), name)
        for col in (est.frequency, est.frequency_stderr, est.mean, est.mean_stderr):
            assert np.all(np.isnan(col))
        assert est.diagnostics["undefined_means"] == 3


def snapshot_counts(mech: PCKV, n: int, snapshots: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(n1, n2) of ``snapshots`` random snapshots of n reports (snapshots, d), from PCKV's
    two-type model with random holders and means per key; the first four are edge cases:
    no key with a count (every mean undefined), keys without a count among others, and
    two keys or one with counts (too few for the means' line, or for any spread)."""
    rng = np.random.default_rng(seed)
    holders = (rng.random((snapshots, mech.d)) < 0.7) * rng.integers(0, n // 4, (snapshots, mech.d))
    qp, qm = mech.holder_probabilities(rng.uniform(-1.0, 1.0, (snapshots, mech.d)))
    held = np.stack([qp, qm, 1.0 - qp - qm], axis=-1)
    rest = np.array([mech.b / 2, mech.b / 2, 1.0 - mech.b])
    counts = (rng.multinomial(holders, held) + rng.multinomial(n - holders, rest)).astype(np.float64)
    counts[0] = 0.0
    counts[1, ::4] = 0.0
    counts[2, 2:] = 0.0
    counts[3, 1:] = 0.0
    return counts[..., 0], counts[..., 1]


@pytest.mark.parametrize("cls", MECHS)
@pytest.mark.parametrize("ell", [1, 3])
def test_estimate_many_is_estimate_on_each_snapshot(cls: type[PCKV], ell: int) -> None:
    """Every estimator on a batch of snapshots (the draws of a prediction) answers what it
    answers on each snapshot alone, up to round-off, edge cases included; asked for
    together (one EM fit for em and eb), each answers what it answers alone."""
    n, snapshots = 4000, 8
    mech = cls(30, 1.0, ell=ell)
    n1, n2 = snapshot_counts(mech, n, snapshots, 3 + ell)
    together = mech.estimate_many(n, {"n1": n1, "n2": n2}, mech.estimator_names)
    assert list(together) == list(mech.estimator_names)
    for name in mech.estimator_names:
        freq, mean = mech.estimate_many(n, {"n1": n1, "n2": n2}, (name,))[name]
        assert freq.shape == mean.shape == (snapshots, mech.d)
        np.testing.assert_array_equal(together[name][0], freq)
        np.testing.assert_array_equal(together[name][1], mean)
        for r in range(snapshots):
            one = mech.estimate(
                Stats.expected(mech, {"n": np.array([float(n)]), "n1": n1[r], "n2": n2[r]}), name
            )
            np.testing.assert_allclose(freq[r], one.frequency, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(mean[r], one.mean, rtol=1e-12, atol=1e-15)
    em = together["em"][1]
    assert np.isnan(em[0]).all() and np.isnan(em[1, ::4]).all() and np.isnan(em[2, 2:]).all()


# ---------------------------------------------------------------------- EM against Algorithm 4
def rare_key_population(d: int, n: int, seed: int) -> KVData:
    """One pair per user, key shares falling off like PCKV's GG data (the last keys are held
    by a few hundred users) and means spread over [-1, 1]."""
    rng = np.random.default_rng(seed)
    share = np.exp(-0.5 * (np.arange(d) / (d / 3.0)) ** 2)
    keys = rng.choice(d, size=n, p=share / share.sum())
    mu = rng.uniform(-1.0, 1.0, d)
    return KVData.from_single_key(d, keys, mu[keys])


@pytest.mark.parametrize(("cls", "seed"), [(PCKVUE, 21), (PCKVGRR, 22)])
def test_em_means_do_not_lose_to_algorithm4(cls: type[PCKV], seed: int) -> None:
    """Why PCKV's EM lost to Algorithm 4 on means, and that it no longer does.

    On the same reports, every key scored (an undefined mean as 0, Algorithm 4's answer
    for such keys): the MLE's plug-in mean (theta+ - theta-)/(theta+ + theta-) is exactly
    +-1 on the keys whose linear holder estimate is below one user but whose +1 count alone
    exceeds the background (the maximiser sits on the face theta- = 0), and those keys
    alone make the plug-in significantly worse than Algorithm 4. EM's mean, which has none
    where the key's mean is not estimable (those keys included), is not worse by more than
    Monte-Carlo noise: the paired
    per-repeat difference of summed squared errors has mean < 4 sd / sqrt(R).
    """
    d, n, reps = 40, 100_000, 12
    users = rare_key_population(d, n, seed)
    _, m_true = users.truth()
    mech = cls(d, 1.0)
    batch = mech.perturb_many(tile(users, reps), np.random.default_rng(seed))
    plug_minus_paper, em_minus_paper = [], []
    for r in range(reps):
        stats = mech.new_stats().fold({k: v[r * n : (r + 1) * n] for k, v in batch.items()})
        paper, em = mech.estimate(stats, "paper"), mech.estimate(stats, "em")
        assert em.latent is not None and not np.isnan(paper.mean).any()
        theta = em.latent
        held = theta[:, 0] + theta[:, 1] > 0
        plug = np.where(held, (theta[:, 0] - theta[:, 1]) / np.where(held, theta[:, 0] + theta[:, 1], 1), 0.0)
        n1, n2 = (stats.arrays[k].astype(float) for k in ("n1", "n2"))
        unheld = mech.baseline_frequency(float(n), n1, n2) < 1.0 / n
        # the boundary artefact: every unheld key the MLE gives holders has a mean of exactly +-1
        np.testing.assert_allclose(np.abs(plug[unheld & held]), 1.0, atol=1e-9)
        # elsewhere EM and Algorithm 4 agree where no clipping binds (interior MLE = linear)
        sq = lambda m: (np.nan_to_num(m) - m_true) ** 2  # noqa: E731
        plug_minus_paper.append(float(np.sum(sq(plug) - sq(paper.mean))))
        em_minus_paper.append(float(np.sum(sq(em.mean) - sq(paper.mean))))
        # EM has no mean exactly where the key's mean is not estimable, every unheld key among them
        not_estimable = np.isnan(mech.estimate(stats, "unbiased").mean)
        assert np.array_equal(np.isnan(em.mean), not_estimable) and np.all(not_estimable[unheld])
    plug_d, em_d = np.array(plug_minus_paper), np.array(em_minus_paper)
    noise = lambda x: 4 * x.std(ddof=1) / np.sqrt(reps)  # noqa: E731
    assert plug_d.mean() > noise(plug_d), (plug_d.mean(), noise(plug_d))
    assert em_d.mean() < noise(em_d) + 1e-12, (em_d.mean(), noise(em_d))


@pytest.mark.parametrize(("cls", "seed"), [(PCKVUE, 7), (PCKVGRR, 8)])
def test_em_standard_errors_match_monte_carlo(cls: type[PCKV], seed: int) -> None:
    """EM's reported standard errors of f and m against the spread of R = 1000 fits (±15%),
    in the regime where the first-order theory holds (same population as the mean test)."""
    reps, ell, eps = 1000, 3, 4.0
    users = population(3, [(1800, {0: 0.5, 1: -0.2, 2: 0.3}), (1200, {})])
    mech = cls(3, eps, ell=ell)
    freqs, means = repeated_estimates(mech, users, reps, seed, "em")
    stats = mech.expected_stats(users)
    est = mech.estimate(stats, "em")
    ratio_f = freqs.var(axis=0, ddof=1) / est.frequency_stderr**2
    ratio_m = means.var(axis=0, ddof=1) / est.mean_stderr**2
    assert np.all(np.abs(ratio_f - 1) < 0.15), ratio_f
    assert np.all(np.abs(ratio_m - 1) < 0.15), ratio_m


@pytest.mark.parametrize(("cls", "seed"), [(PCKVUE, 31), (PCKVGRR, 32)])
def test_eb_means_every_key_without_a_per_key_standard_error(cls: type[PCKV], seed: int) -> None:
    """``eb`` answers every key, beats Algorithm 4 (every key answered) on a population with
    rare keys at epsilon = 1, and exports no per-key standard error (docs/mechanisms.md,
    *Calibration of standard errors*; its intervals' coverage is checked on the reference
    populations by tests/test_calibration.py)."""
    d, n, reps = 100, 200_000, 12
    users = rare_key_population(d, n, seed)
    _, m_true = users.truth()
    mech = cls(d, 1.0)
    batch = mech.perturb_many(tile(users, reps), np.random.default_rng(seed))
    eb_sq, em_sq = [], []
    for r in range(reps):
        stats = mech.new_stats().fold({k: v[r * n : (r + 1) * n] for k, v in batch.items()})
        eb, em = mech.estimate(stats, "eb"), mech.estimate(stats, "paper")
        assert not np.isnan(eb.mean).any() and np.isnan(eb.mean_stderr).all()
        assert np.all((eb.frequency >= 0) & (eb.frequency <= 1) & (np.abs(eb.mean) <= 1))
        eb_sq.append(np.sum((eb.mean - m_true) ** 2))
        em_sq.append(np.sum((np.nan_to_num(em.mean) - m_true) ** 2))
    gain = np.array(em_sq) - np.array(eb_sq)
    assert gain.mean() > 4 * gain.std(ddof=1) / np.sqrt(reps)
