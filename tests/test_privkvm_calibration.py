"""PrivKVM's exported errors are calibrated (docs/mechanisms.md, *PrivKVM estimators*): the
basis intervals cover at 95%, every estimator's standard error is about the RMSE of its
own point estimate, a clipped mean never carries a zero standard error, and a mean the
data cannot separate from no holders is counted as not estimable."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.mechanisms import create
from kvldp.evaluation.calibration import calibrate

from support import multi_key_population

REPEATS = 40
KEYS = 6


def coverage_tolerance(pairs: int) -> float:
    """4 binomial standard deviations of a 95% coverage over ``pairs`` pairs."""
    return 4 * math.sqrt(0.95 * 0.05 / pairs)


def ratio_tolerance(repeats: int, keys: int) -> float:
    """4 sd of the median over keys of (mean stderr)/(RMSE): per key about 1/sqrt(2R), the
    median of k keys 1.2533/sqrt(k) of that."""
    return 4 * 1.2533 / math.sqrt(2 * repeats) / math.sqrt(keys)


@pytest.mark.parametrize("epsilon", [1.0, 8.0])
@pytest.mark.parametrize("estimator", ["unbiased", "paper", "em", "normsub", "virtual"])
def test_intervals_cover_and_standard_errors_match_the_errors(estimator: str, epsilon: float) -> None:
    users = multi_key_population(20_000, KEYS, np.random.default_rng(61))
    mech = create("privkvm", KEYS, epsilon, rounds=3)
    result = calibrate(mech, estimator, users, REPEATS, 62)
    assert result.mean is not None
    for quantity in (result.frequency, result.mean):
        assert abs(quantity.coverage - 0.95) <= coverage_tolerance(quantity.pairs), (estimator, quantity)
        assert abs(quantity.ratio - 1.0) <= ratio_tolerance(REPEATS, KEYS), (estimator, quantity)
        assert quantity.answered == 1.0 and quantity.with_stderr == 1.0


def test_a_clipped_mean_carries_a_positive_standard_error() -> None:
    """Means near -1 at a small value budget: many point estimates are clipped to -1, and
    every one of them exports a standard error above 0 and an interval holding its point."""
    rng = np.random.default_rng(63)
    n, d = 20_000, 3
    present = rng.random((n, d)) < 0.5
    users = KVData.from_dense(present, np.full((n, d), -0.91))
    mech = create("privkvm", d, 2.0, rounds=3)
    clipped = 0
    for _ in range(10):
        for estimator in mech.estimator_names:
            est = mech.estimate(mech.collect(users, rng), estimator)
            finite = np.isfinite(est.mean)
            clipped += int(np.sum(est.mean[finite] == -1.0))
            assert np.all(est.mean_stderr[finite] > 0), estimator
            lo, hi = est.mean_interval
            assert np.all(lo[finite] <= hi[finite]), estimator
    assert clipped > 0


def test_a_mean_without_significant_holders_is_not_estimable_and_counted() -> None:
    """A key nobody holds and one everybody holds: the first's frequency is not significantly
    above 0 in most collections, its mean is NaN there and counted; the second is always
    estimable."""
    rng = np.random.default_rng(64)
    n = 20_000
    present = np.column_stack([np.zeros(n, dtype=bool), np.ones(n, dtype=bool)])
    users = KVData.from_dense(present, np.full((n, 2), 0.5))
    mech = create("privkvm", 2, 1.0, rounds=3)
    unanswered = 0
    for _ in range(20):
        for estimator in mech.estimator_names:
            est = mech.estimate(mech.collect(users, rng), estimator)
            assert np.isfinite(est.mean[1]) and np.isfinite(est.frequency).all()
            missing = int(np.isnan(est.mean[0]))
            assert est.diagnostics["not_estimable_means"] == missing == est.diagnostics["undefined_means"]
            assert np.isnan(est.mean_stderr[0]) == bool(missing)
            unanswered += missing
    # Pr[f^ significant at a true f = 0] is at most 0.025 per collection
    assert unanswered >= 0.9 * 20 * len(mech.estimator_names)
