"""PrivKV, PrivKV-A, EM3/EM4, KVUE, KVOH and F2M against their worked numbers (docs/mechanisms.md,
*Key-sampled mechanisms*)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.em import em_counts
from kvldp.common.guarantees.privacy_audit import audit
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.keysampled import ABSENT, NEG, POS, KeySampledMechanism
from kvldp.common.mechanisms.privkv import em4_transition, lpp_transition
from kvldp.common.primitives import rr_keep
from kvldp.sim import datasets

P1_EPS1 = 0.7310585786300049  # e / (e + 1)


def one_key_population() -> KVData:
    """The one-key population of the worked numbers: 2000 holders with v* = +1, 1000 with -1, 7000 without."""
    return KVData.from_pairs(1, [{0: 1.0}] * 2000 + [{0: -1.0}] * 1000 + [{}] * 7000)


def test_privkv_worked_numbers() -> None:
    mech = create("privkv", 1, 2.0)  # eps1 = eps2 = 1
    assert mech.p1 == pytest.approx(P1_EPS1, abs=1e-15)
    expected = mech.expected_stats(one_key_population())
    counts = expected.arrays["counts"][0]
    assert counts[POS] == pytest.approx(2206.8001988135106, rel=1e-12)
    assert counts[NEG] == pytest.approx(1868.9654866664696, rel=1e-12)
    assert counts[ABSENT] == pytest.approx(5924.234314520019, rel=1e-12)
    paper = mech.estimate(expected, "paper")
    assert paper.frequency[0] == pytest.approx(0.3, abs=1e-12)
    assert paper.mean[0] == pytest.approx(0.17936717540814953, abs=1e-12)
    theta = mech._linear_states(counts[None, :])
    assert theta[0, POS] * 10000 == pytest.approx(2000.0, abs=1e-8)  # PrivKV-A's N1*
    assert theta[0, NEG] * 10000 == pytest.approx(1000.0, abs=1e-8)  # N-1*
    assert mech.estimate(expected, "unbiased").mean[0] == pytest.approx(1 / 3, abs=1e-12)


def test_privkv_paper_mean_is_shrunk_by_w() -> None:
    """E[m_paper] = w m with w = f p1 / (f p1 + (1 - f)(1 - p1)) (docs/mechanisms.md, *PrivKV*)."""
    mech = create("privkv", 1, 2.0)
    w = 0.3 * mech.p1 / (0.3 * mech.p1 + 0.7 * (1 - mech.p1))
    assert w == pytest.approx(0.5381015262244488, abs=1e-12)
    assert mech.estimate(mech.expected_stats(one_key_population()), "paper").mean[0] == pytest.approx(
        w / 3, abs=1e-12
    )


def test_privkv_a_closed_form_equals_inverse_of_em3_model() -> None:
    """Sun et al. 2019 (Sec. III)'s PrivKV-A formulas are the inverse of the three-state likelihood."""
    p1, p2 = rr_keep(0.8), rr_keep(1.7)
    m1, m_1, m = 2500.0, 1900.0, 10000.0
    p1p, p2p = 2 * p1 - 1, 2 * p2 - 1
    n1 = ((p1 * p2p + p1p) * m1 + (p1 * p2p - p1p) * m_1 - p1 * p2p * (1 - p1) * m) / (2 * p1 * p1p * p2p)
    n_1 = ((p1 * p2p - p1p) * m1 + (p1 * p2p + p1p) * m_1 - p1 * p2p * (1 - p1) * m) / (2 * p1 * p1p * p2p)
    pi = np.array([m_1, m - m1 - m_1, m1]) / m
    theta = np.linalg.inv(lpp_transition(p1, p2)) @ pi
    assert theta[POS] * m == pytest.approx(n1, rel=1e-12)
    assert theta[NEG] * m == pytest.approx(n_1, rel=1e-12)


def test_em_posterior_worked_numbers() -> None:
    """Horigome et al. 2023, Sec. 3.2: with uniform theta0, post(<1,+1> | <1,+1>) = p1 p2 = 0.3874556190 (EM4) and
    p1p2 / (p1p2 + p1q2 + q1/2) = 0.4776152000 (EM3) at eps1 = eps2 = 1/2."""
    p = rr_keep(0.5)
    p4 = em4_transition(p, p)
    post4 = p4[POS] * 0.25 / (p4[POS] @ np.full(4, 0.25))
    assert post4[0] == pytest.approx(0.3874556190, abs=1e-9)
    p3 = lpp_transition(p, p)
    post3 = p3[POS] / 3 / (p3[POS] @ np.full(3, 1 / 3))
    assert post3[POS] == pytest.approx(0.4776152000, abs=1e-9)


def test_em_never_decreases_likelihood_and_stays_in_simplex() -> None:
    rng = np.random.default_rng(11)
    mech = create("privkv", 20, 0.6)
    users = KVData.from_dense(rng.random((4000, 20)) < 0.3, np.clip(rng.normal(0.4, 0.4, (4000, 20)), -1, 1))
    counts = mech.collect(users, rng).arrays["counts"]
    for p in (mech.transition(), em4_transition(mech.p1, mech.p2)):
        res = em_counts(p, counts, tol=1e-12, trace=True)
        ll = np.array(res.loglik)
        assert np.all(np.diff(ll, axis=0) >= -1e-9 * np.abs(ll[1:]))
        assert np.all(res.theta >= 0) and np.allclose(res.theta.sum(axis=1), 1.0)


def test_em3_equals_privkv_a_inside_the_simplex_and_beats_it_outside() -> None:
    rng = np.random.default_rng(12)
    mech = create("privkv", 30, 2.0)
    users = KVData.from_dense(
        rng.random((20000, 30)) < 0.3, np.clip(rng.normal(0.5, 0.3, (20000, 30)), -1, 1)
    )
    stats = mech.collect(users, rng)
    counts = stats.arrays["counts"].astype(float)
    linear = mech._linear_states(counts)
    em = mech.estimate(stats, "em", tol=1e-13, max_iter=200_000)
    interior = np.all(linear > 0, axis=1)
    assert interior.sum() >= 20
    np.testing.assert_allclose(em.latent[interior], linear[interior], atol=1e-7)
    # EM and the closed form share f whenever f lies in (0, 1) (docs/mechanisms.md, *PrivKV EM3 and EM4*)
    np.testing.assert_allclose(em.frequency[interior], mech.estimate(stats).frequency[interior], atol=1e-7)
    ll_em = (counts * np.log(em.latent @ mech.transition().T)).sum(axis=1)
    projected = mech.estimate(stats, "normsub")
    assert np.all(np.abs(projected.frequency - em.frequency) < 5 * em.frequency_stderr)
    assert np.all(np.isfinite(ll_em))


def test_em4_mean_is_not_identified() -> None:
    """docs/mechanisms.md, *PrivKV EM3 and EM4*: EM4 converges to a start-dependent point; f is identified, m is not."""
    rng = np.random.default_rng(13)
    n = 20_000
    held = rng.random(n) < 0.3
    values = np.where(rng.random(n) < 0.75, 1.0, -1.0)  # discretised mean 0.5
    users = KVData.from_single_key(1, np.where(held, 0, -1), values)
    mech = create("privkv", 1, 2.0)
    counts = mech.collect(users, rng).arrays["counts"]
    p4 = em4_transition(mech.p1, mech.p2)
    means, freqs = [], []
    for start in ([0.25] * 4, [0.2, 0.05, 0.375, 0.375], [0.05, 0.2, 0.5, 0.25]):
        theta = em_counts(p4, counts, theta0=np.array([start]), tol=1e-12, max_iter=100_000).theta[0]
        freqs.append(theta[0] + theta[1])
        means.append((theta[0] - theta[1]) / (theta[0] + theta[1]))
    assert max(means) - min(means) > 0.3, means
    assert max(freqs) - min(freqs) < 1e-6
    with pytest.raises(ValueError, match="never warm-started"):
        mech.estimate(mech.new_stats().fold(mech.perturb_many(users, rng)), "em4", warm_start=np.ones((1, 3)))


def test_kvue_worked_numbers() -> None:
    mech = create("kvue", 1, 1.0)
    assert (mech.p, mech.q) == pytest.approx((0.5761168847658291, 0.21194155761708547), abs=1e-15)
    counts = mech.expected_stats(one_key_population()).arrays["counts"][0]
    np.testing.assert_allclose(
        counts, [2483.5909033195985, 4668.642866212061, 2847.7662304683417], rtol=1e-12
    )
    theta = mech._linear_states(counts[None, :])[0] * 10000
    np.testing.assert_allclose(theta, [1000.0, 7000.0, 2000.0], atol=1e-8)


def test_kvoh_worked_numbers() -> None:
    mech = create("kvoh", 1, 1.0)
    assert mech.p == pytest.approx(0.6224593312018546, abs=1e-15)
    patterns = mech.expected_stats(one_key_population()).arrays["counts"][0]
    bits = np.array([[(b >> i) & 1 for i in range(3)] for b in range(8)])
    np.testing.assert_allclose(
        patterns @ bits, [4020.3253503851633, 5489.837324807419, 4265.244012788873], rtol=1e-12
    )
    theta = mech._linear_states(patterns[None, :])[0] * 10000
    np.testing.assert_allclose(theta, [1000.0, 7000.0, 2000.0], atol=1e-8)


def test_kvoh_em_is_more_efficient_and_its_standard_error_is_honest() -> None:
    """EM uses all 8 patterns: its frequency variance is below the paper's bit-sum estimator
    and below the best linear combination of bit sums (docs/mechanisms.md, *KVOH*: (2/3) e^(eps/2)/(N(e^(eps/2)-1)^2)
    plus the population term). Its (Fisher) standard error must match Monte Carlo: R = 600
    repeats, so the variance ratio has sd sqrt(2/R) = 5.8% and the tolerance is 4 sd."""
    rng = np.random.default_rng(15)
    n, repeats = 6000, 600
    users = KVData.from_single_key(1, np.where(rng.random(n) < 0.35, 0, -1), np.full(n, 0.2))
    mech = create("kvoh", 1, 1.0)
    expected = mech.expected_stats(users)
    paper_var = mech.estimate(expected, "unbiased").frequency_stderr[0] ** 2
    em_var = mech.estimate(expected, "em", tol=1e-13, max_iter=100_000).frequency_stderr[0] ** 2
    e = math.exp(0.5)
    f = users.truth()[0][0]
    best_linear = (2 / 3) * e / (n * (e - 1) ** 2)  # d = 1: every user reports, no population term
    assert em_var < best_linear < paper_var
    draws = np.array([mech.estimate(mech.collect(users, rng), "em").frequency[0] for _ in range(repeats)])
    assert abs(draws.var(ddof=1) / em_var - 1) < 4 * math.sqrt(2 / repeats)
    assert abs(draws.mean() - f) < 4 * math.sqrt(em_var / repeats)


def test_f2m_worked_numbers() -> None:
    mech = create("f2m", 1, 2.0)
    counts = mech.expected_stats(one_key_population()).arrays["counts"][0]  # c = 2k' + (v'+1)/2
    np.testing.assert_allclose(
        counts,
        [1717.5544421888815, 4206.6798723311385, 1433.9769287710797, 2641.788756708901],
        rtol=1e-12,
    )
    est = mech.estimate(mech.expected_stats(one_key_population()))
    assert est.frequency[0] == pytest.approx(0.3, abs=1e-12)
    m_all = (counts[1] + counts[3] - counts[0] - counts[2]) / 10000 / (2 * mech.p2 - 1)
    assert m_all == pytest.approx(0.8, abs=1e-12)
    assert est.mean[0] == pytest.approx(1 / 3, abs=1e-12)


@pytest.mark.parametrize("default_value", [-1.0, -0.3, 0.0, 0.6, 1.0])
def test_f2m_default_value_round_trip_and_privacy(default_value: float) -> None:
    mech = create("f2m", 2, 1.5, default_value=default_value)
    users = KVData.from_pairs(2, [{0: 0.5}] * 300 + [{1: -0.2, 0: 1.0}] * 200 + [{}] * 500)
    f, m = users.truth()
    est = mech.estimate(mech.expected_stats(users))
    np.testing.assert_allclose(est.frequency, f, atol=1e-12)
    np.testing.assert_allclose(est.mean, m, atol=1e-12)
    result = audit(mech, exhaustive=True)
    assert result.ok
    assert result.tight == (abs(default_value) == 1.0)


@pytest.mark.parametrize("name", ["privkv", "kvue", "kvoh", "f2m"])
@pytest.mark.parametrize("state", [NEG, ABSENT, POS])
def test_client_emits_exactly_the_transition_column(name: str, state: int) -> None:
    """The literal client and P are independent descriptions: every output symbol's count
    must match n P[z | x] within 5.5 binomial standard errors (Bonferroni over cells)."""
    mech = create(name, 1, 1.2)
    assert isinstance(mech, KeySampledMechanism)
    n = 200_000
    users = KVData.from_pairs(1, [{0: 1.0} if state == POS else {0: -1.0} if state == NEG else {}] * n)
    rng = np.random.default_rng(100 + state)
    counts = mech.collect(users, rng).arrays["counts"][0]
    prob = mech.transition()[:, state]
    z = (counts - n * prob) / np.sqrt(n * prob * (1 - prob))
    assert np.all(np.abs(z) < 5.5), z


def test_key_fraction_changes_the_split_and_the_exact_level() -> None:
    mech = create("privkv", 5, 2.0, key_fraction=0.3)
    assert (mech.eps1, mech.eps2) == pytest.approx((0.6, 1.4))
    result = audit(mech)
    expected = max(1.4, 0.6 + math.log(2 / (1 + math.exp(-1.4))))
    assert result.max_log_ratio == pytest.approx(expected, abs=1e-12)
    assert result.ok and not result.tight


def test_normsub_is_consistent() -> None:
    rng = np.random.default_rng(14)
    mech = create("kvoh", 40, 0.5)
    stats = mech.collect(KVData.from_dense(rng.random((6000, 40)) < 0.1, np.zeros((6000, 40))), rng)
    ns = mech.estimate(stats, "normsub")
    assert np.all((ns.frequency >= 0) & (ns.frequency <= 1))
    assert np.all((ns.mean >= -1) & (ns.mean <= 1) | np.isnan(ns.mean))
    raw = mech.estimate(stats)
    assert np.any((raw.frequency < 0) | (raw.frequency > 1))  # the case Norm-Sub exists for


def test_em_warm_start_converges_to_the_same_fit_faster() -> None:
    rng = np.random.default_rng(16)
    mech = create("kvoh", 30, 2.0)
    population = KVData.from_dense(rng.random((40_000, 30)) < 0.4, np.full((40_000, 30), 0.3))
    stats = mech.collect(population, rng)
    previous = mech.estimate(stats, "em")
    more = stats.merge(mech.collect(population.rows(0, 2000), rng))
    warm = mech.estimate(more, "em", warm_start=previous)
    cold = mech.estimate(more, "em")
    assert warm.diagnostics["em_warm_start"] and not cold.diagnostics["em_warm_start"]
    assert warm.diagnostics["em_iterations"] < cold.diagnostics["em_iterations"]
    np.testing.assert_allclose(warm.frequency, cold.frequency, atol=1e-6)
    ignored = mech.estimate(more, "em", warm_start=np.ones((3, 3)))  # wrong shape: uniform start
    assert not ignored.diagnostics["em_warm_start"]


def test_expected_stats_cannot_be_folded_or_stored() -> None:
    mech = create("kvue", 1, 1.0)
    expected = mech.expected_stats(one_key_population())
    with pytest.raises(ValueError, match="real-valued"):
        expected.to_bytes()
    with pytest.raises(ValueError, match="real-valued"):
        expected.merge(mech.new_stats())
    assert isinstance(expected, Stats) and not expected.exact


@pytest.mark.parametrize(("name", "seed"), [("kvue", 41), ("kvoh", 42)])
def test_eb_beats_em_on_alike_keys_and_its_intervals_cover(name: str, seed: int) -> None:
    """``eb`` on Sun's Gaussian population (f ~ N(0.5, 0.2^2), m ~ N(0, 0.5^2), truncated) at
    epsilon = 0.5, where each key's noise is comparable to the keys' spread: on the same
    reports its summed squared error is below EM's for frequencies and for means (over
    the keys whose mean EM estimates) by more than 4 sd / sqrt(R) of the paired
    difference, every key has an answer, no per-key standard error is exported, and the
    intervals (the closed-form basis's) hold the truth for 0.95 of the pairs where they
    are bounded, within 4 sd of a proportion over those pairs."""
    d, n, reps = 100, 50_000, 24
    users = datasets.generate("sun_gaussian", n, d, seed).users
    f_true, m_true = users.truth()
    mech = create(name, d, 0.5)
    rng = np.random.default_rng(seed)
    sq: dict[str, list[tuple[float, float]]] = {"em": [], "eb": []}
    hits, bounded = 0, 0
    for _ in range(reps):
        stats = mech.collect(users, rng)
        em, eb = mech.estimate(stats, "em"), mech.estimate(stats, "eb")
        assert not np.isnan(eb.frequency).any() and not np.isnan(eb.mean).any()
        assert np.all((eb.frequency >= 0) & (eb.frequency <= 1) & (np.abs(eb.mean) <= 1))
        answered = np.isfinite(em.mean)  # the keys whose mean EM can estimate
        for label, est in (("em", em), ("eb", eb)):
            sq[label].append(
                (
                    float(np.sum((est.frequency - f_true) ** 2)),
                    float(np.sum((est.mean[answered] - m_true[answered]) ** 2)),
                )
            )
        assert np.isnan(eb.frequency_stderr).all() and np.isnan(eb.mean_stderr).all()
        for (lo, hi), truth in ((eb.frequency_interval, f_true), (eb.mean_interval, m_true)):
            ok = np.isfinite(lo) & np.isfinite(truth)
            bounded += int(ok.sum())
            hits += int(np.sum((lo[ok] <= truth[ok]) & (truth[ok] <= hi[ok])))
    gain = np.array(sq["em"]) - np.array(sq["eb"])  # (reps, 2): frequency, mean
    assert np.all(gain.mean(axis=0) > 4 * gain.std(axis=0, ddof=1) / np.sqrt(reps)), gain
    assert abs(hits / bounded - 0.95) < 4 * np.sqrt(0.95 * 0.05 / bounded), (hits, bounded)


@pytest.mark.parametrize("name", ["kvue", "pckv_grr"])
def test_eb_means_follow_keys_of_like_frequency(name: str) -> None:
    """Horigome's linear population: key k's frequency and mean both rise with k, so the
    frequent keys, the ones precise enough to fit the means' prior on, all have high
    means. A prior with one centre pulled every rare key toward them (5.7x EM's MSE(m)
    for KVUE at epsilon = 1); centred on a line in the frequency it pulls each key toward
    keys as frequent as it. On the same reports, R = 12: eb's summed squared error of the
    means is below EM's by more than 4 sd / sqrt(R) of the paired difference."""
    d, n, reps = 50, 100_000, 12
    users = datasets.generate("linear", n, d, 3).users
    _, m_true = users.truth()
    mech = create(name, d, 1.0, **({"ell": 25} if name == "pckv_grr" else {}))
    rng = np.random.default_rng(11)
    gain = []
    for _ in range(reps):
        stats = mech.collect(users, rng)
        em, eb = mech.estimate(stats, "em"), mech.estimate(stats, "eb")
        gain.append(np.sum((np.nan_to_num(em.mean) - m_true) ** 2) - np.sum((eb.mean - m_true) ** 2))
    g = np.array(gain)
    assert g.mean() > 4 * g.std(ddof=1) / np.sqrt(reps), g


@pytest.mark.parametrize(
    ("name", "params"), [("kvue", {}), ("kvoh", {}), ("f2m", {}), ("privkv", {}), ("kvue_multi", {"t": 2})]
)
def test_estimate_many_is_estimate_on_each_snapshot(name: str, params: dict[str, int]) -> None:
    """``em`` and ``eb`` on a batch of snapshots (the draws of a prediction) answer what they
    answer on each snapshot alone, up to round-off, and asked for together (one EM fit)
    what each answers alone. Counts are drawn from random states per key; the first four
    snapshots are edge cases: no reports at all (every mean undefined), keys without
    reports among others, and two keys or one with reports (too few for the means' line,
    or for any spread)."""
    mech = create(name, 30, 1.0, **params)
    assert isinstance(mech, KeySampledMechanism)
    n, snapshots = 6000, 8
    rng = np.random.default_rng(17)
    states = rng.dirichlet([0.5, 2.0, 0.5], size=(snapshots, mech.d))
    reports = rng.integers(0, 2 * n // mech.d, (snapshots, mech.d))
    counts = rng.multinomial(reports, states @ mech.transition().T).astype(np.float64)
    counts[0] = 0.0
    counts[1, ::4] = 0.0
    counts[2, 2:] = 0.0
    counts[3, 1:] = 0.0
    drawn = [e for e in ("em", "eb") if e in mech.estimator_names]
    together = mech.estimate_many(n, {"counts": counts}, drawn)
    assert list(together) == drawn
    for estimator in drawn:
        freq, mean = mech.estimate_many(n, {"counts": counts}, (estimator,))[estimator]
        assert freq.shape == mean.shape == (snapshots, mech.d)
        np.testing.assert_array_equal(together[estimator][0], freq)
        np.testing.assert_array_equal(together[estimator][1], mean)
        for r in range(snapshots):
            one = mech.estimate(
                Stats.expected(mech, {"counts": counts[r], "n": np.array([float(n)])}), estimator
            )
            np.testing.assert_allclose(freq[r], one.frequency, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(mean[r], one.mean, rtol=1e-12, atol=1e-15)
        if estimator == "em":
            assert np.isnan(mean[0]).all() and np.isnan(freq[1, ::4]).all() and np.isnan(mean[2, 2:]).all()
