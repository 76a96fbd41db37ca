"""The ``robust`` estimator of the key-sampled mechanisms (docs/robust.md).

Statistical checks at fixed seeds, tolerances from the variances they test:

* the per-key report-excess test flags genuine keys at its documented rate;
* with nothing flagged, ``robust`` is ``em`` exactly;
* against maximal-gain fakes (tests/support/fakes.py) the attacked keys are flagged and
  the targets' frequency gain is within 4 standard errors of 0, while ``unbiased`` and
  ``em`` follow the fakes;
* a flagged key's exported standard errors are honest under attack (coverage and
  stderr/RMSE over repeated collections);
* what it refuses: unknown options, mechanisms without it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.estimation.robust import FALSE_ALARM, gain_order, remove_excess, report_excess
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.base import UnknownEstimator
from kvldp.sim import datasets

from support.fakes import attacked

KEY_SAMPLED = ["privkv", "kvue", "kvoh", "f2m", "kvue_multi"]


def test_the_excess_test_flags_genuine_keys_at_its_false_alarm_rate() -> None:
    """Genuine report counts are Multinomial(n, uniform over d keys): over 4,000 collections
    of 50 keys the flags are Poisson around 2e5 x 1e-4 = 20 (measured rate 1.05e-4 over
    2e6 keys; the median's own noise makes it slightly more than nominal)."""
    rng = np.random.default_rng(5)
    d, n, collections = 50, 100_000, 4_000
    counts = rng.multinomial(n, np.full(d, 1.0 / d), size=collections).astype(np.float64)
    flags = sum(int(report_excess(row, 1.0 / d).flagged.sum()) for row in counts)
    expected = FALSE_ALARM * d * collections
    assert abs(flags - expected) <= 4 * math.sqrt(expected), flags


def test_excess_is_taken_from_the_maximal_gain_symbols_first() -> None:
    kvue = create("kvue", 3, 1.0)
    order = gain_order(kvue.linear_inverse(), 2, 0)
    assert order[0] == 2  # "holds, +1"
    counts = np.array([[10.0, 10.0, 5.0], [1.0, 1.0, 1.0]])
    kept = remove_excess(counts, np.array([8.0, 0.0]), order)
    assert kept[0, 2] == 0.0 and kept[0].sum() == 17.0 and np.array_equal(kept[1], counts[1])


@pytest.mark.parametrize("name", KEY_SAMPLED)
def test_without_a_flag_robust_is_em(name: str) -> None:
    users = datasets.generate("gaussian_pckv", 20_000, 20, 5).users
    mech = create(name, 20, 1.0)
    stats = mech.collect(users, np.random.default_rng(2))
    robust, em = mech.estimate(stats, "robust"), mech.estimate(stats, "em")
    assert robust.diagnostics["robust_flagged_keys"] == 0
    assert robust.estimator == "robust"
    for field in ("frequency", "frequency_stderr", "mean", "mean_stderr"):
        np.testing.assert_array_equal(getattr(robust, field), getattr(em, field))


@pytest.mark.parametrize("name", KEY_SAMPLED)
@pytest.mark.parametrize(("beta", "r"), [(0.01, 1), (0.05, 3)])
def test_maximal_gain_fakes_are_flagged_and_their_gain_removed(name: str, beta: float, r: int) -> None:
    """100,000 genuine devices of gaussian_pckv over 20 keys at eps = 1; the r rarest keys
    are the targets. ``unbiased`` and ``em`` gain more than 4 standard errors; ``robust`` flags
    exactly the targets and its gain is within 4 standard errors of zero (the corrected
    estimate with fakes and the estimate without them are two estimates of the same
    genuine frequency)."""
    users = datasets.generate("gaussian_pckv", 100_000, 20, 5).users
    targets = np.sort(np.argsort(users.truth()[0])[:r])
    mech = create(name, 20, 1.0)
    genuine = mech.collect(users, np.random.default_rng(3))
    poisoned = attacked(mech, genuine, targets, beta, seed=4)
    before, after = mech.estimate(genuine, "robust"), mech.estimate(poisoned, "robust")
    assert np.array_equal(np.flatnonzero(after.frequency != mech.estimate(poisoned, "em").frequency), targets)
    assert after.diagnostics["robust_flagged_keys"] == r
    gain = float(np.sum(after.frequency[targets] - before.frequency[targets]))
    sd = math.sqrt(
        float(np.sum(after.frequency_stderr[targets] ** 2 + before.frequency_stderr[targets] ** 2))
    )
    assert abs(gain) <= 4 * sd, (gain, sd)
    for baseline in ("unbiased", "em"):
        naive = float(
            np.sum(
                mech.estimate(poisoned, baseline).frequency[targets]
                - mech.estimate(genuine, baseline).frequency[targets]
            )
        )
        assert naive > 4 * sd and naive > 4 * abs(gain), (baseline, naive, gain)


@pytest.mark.parametrize("name", ["kvue", "privkv"])
def test_a_flagged_key_has_honest_error_bars_under_attack(name: str) -> None:
    """A key held by 30% of 20,000 devices (values +-0.5) is attacked by 5% fakes in every
    one of 200 collections. Its corrected frequency and mean must cover the genuine truth
    at 95% (within 4 binomial standard errors of the proportion) and their standard error
    match their RMSE (within 4 x 1/sqrt(2R))."""
    d, n, repeats = 10, 20_000, 200
    rng = np.random.default_rng(8)
    holds = rng.random(n) < 0.3
    values = np.where(rng.random(n) < 0.75, 0.5, -0.5)
    pairs = [{0: float(v)} if h else {} for h, v in zip(holds, values, strict=True)]
    from kvldp.common.data.kvdata import KVData

    users = KVData.from_pairs(d, pairs)
    true_f, true_m = users.truth()
    mech = create(name, d, 2.0)
    target = np.array([0])
    freqs, means, f_cov, m_cov, f_se, m_se = [], [], 0, 0, [], []
    for rep in range(repeats):
        genuine = mech.collect(users, np.random.default_rng([rep, 1]))
        est = mech.estimate(attacked(mech, genuine, target, 0.05, seed=rep), "robust")
        assert est.diagnostics["robust_flagged_keys"] >= 1
        lo, hi = est.frequency_interval
        f_cov += int(lo[0] <= true_f[0] <= hi[0])
        mlo, mhi = est.mean_interval
        m_cov += int(mlo[0] <= true_m[0] <= mhi[0])
        freqs.append(est.frequency[0])
        means.append(est.mean[0])
        f_se.append(est.frequency_stderr[0])
        m_se.append(est.mean_stderr[0])
    band = 4 * math.sqrt(0.95 * 0.05 / repeats)
    assert abs(f_cov / repeats - 0.95) <= band, f_cov
    assert abs(m_cov / repeats - 0.95) <= band, m_cov
    tol = 4 / math.sqrt(2 * repeats)
    f_ratio = np.mean(f_se) / math.sqrt(np.mean((np.array(freqs) - true_f[0]) ** 2))
    m_ratio = np.mean(m_se) / math.sqrt(np.mean((np.array(means) - true_m[0]) ** 2))
    assert abs(f_ratio - 1) <= tol, f_ratio
    assert abs(m_ratio - 1) <= tol, m_ratio


def test_robust_warm_starts_from_its_previous_estimate_as_em_does() -> None:
    """The aggregator's refit passes the previous estimate as ``warm_start`` to every
    estimator that returned a latent fit; ``robust`` hands it to its EM."""
    mech = create("kvue", 10, 1.0)
    stats = mech.collect(datasets.generate("uniform", 20_000, 10, 1).users, np.random.default_rng(0))
    first = mech.estimate(stats, "robust")
    assert first.latent is not None
    again = mech.estimate(stats, "robust", warm_start=first)
    assert again.diagnostics["em_warm_start"] is True
    np.testing.assert_allclose(again.frequency, first.frequency, atol=1e-6)


def test_robust_refuses_unknown_options() -> None:
    mech = create("kvue", 5, 1.0)
    stats = mech.collect(datasets.generate("uniform", 500, 5, 1).users, np.random.default_rng(0))
    with pytest.raises(TypeError, match="bogus"):
        mech.estimate(stats, "robust", bogus=1)


@pytest.mark.parametrize("name", ["pckv_ue", "pckv_grr", "grr"])
def test_mechanisms_without_robust_say_so(name: str) -> None:
    mech = create(name, 5, 1.0)
    stats = mech.new_stats()
    with pytest.raises(UnknownEstimator, match=f"{name} has no estimator 'robust'"):
        mech.estimate(stats, "robust")


@pytest.mark.parametrize("name", KEY_SAMPLED)
def test_no_reports_give_nan_and_no_flag(name: str) -> None:
    mech = create(name, 5, 1.0)
    est = mech.estimate(mech.new_stats(), "robust")
    assert est.diagnostics["robust_flagged_keys"] == 0
    assert np.all(np.isnan(est.frequency)) and np.all(np.isnan(est.mean))


@pytest.mark.full
@pytest.mark.parametrize("name", KEY_SAMPLED)
def test_docs_setting_maximal_gain_fakes_lose_their_gain(name: str) -> None:
    """docs/robust.md's setting: 100,000 genuine devices of gaussian_pckv over 50 keys at
    eps = 1, the r rarest keys targeted by beta = 1% and 5% of fakes: every target is
    flagged and the summed gain of ``robust`` is within 4 standard errors of zero, while
    ``em``'s is more than 6 of them."""
    users = datasets.generate("gaussian_pckv", 100_000, 50, 5).users
    mech = create(name, 50, 1.0)
    genuine = mech.collect(users, np.random.default_rng(100))
    before = mech.estimate(genuine, "robust")
    for beta in (0.01, 0.05):
        for r in (1, 3):
            targets = np.sort(np.argsort(users.truth()[0])[:r])
            poisoned = attacked(mech, genuine, targets, beta, seed=7)
            after = mech.estimate(poisoned, "robust")
            assert after.diagnostics["robust_flagged_keys"] == r
            gain = float(np.sum(after.frequency[targets] - before.frequency[targets]))
            sd = math.sqrt(
                float(np.sum(after.frequency_stderr[targets] ** 2 + before.frequency_stderr[targets] ** 2))
            )
            naive = float(
                np.sum(
                    mech.estimate(poisoned, "em").frequency[targets]
                    - mech.estimate(genuine, "em").frequency[targets]
                )
            )
            assert abs(gain) <= 4 * sd and naive > 6 * sd, (beta, r, gain, naive, sd)
