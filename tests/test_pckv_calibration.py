"""Calibration of PCKV's intervals and standard errors (docs/mechanisms.md, *PCKV intervals*;
:meth:`kvldp.common.mechanisms.pckv_estimate.PCKVEstimation.inference_basis`) and the
clipped-normal RMSE they use (:mod:`kvldp.common.estimation.clipped_normal`).

Tolerances: coverage within 4 sqrt(0.95 * 0.05 / pairs) of 0.95; the median over 50 keys
of (mean stderr)/(RMSE over R = 24 collections) within 0.15 of 1 (the per-key ratio has
sd ~ 1/sqrt(2R) = 0.14, its median over 50 keys ~ 0.03, plus the ~2% upward bias of
1/RMSE estimated from 24 collections: 0.15 is more than 4 sd).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvldp.common.data.stats import Stats
from kvldp.common.estimation.clipped_normal import clipped_rmse
from kvldp.common.mechanisms import create
from kvldp.evaluation.calibration import calibrate
from kvldp.sim import datasets


def test_clipped_rmse_matches_monte_carlo() -> None:
    """Against 200,000 draws: on a bound sqrt(1/2) of se, far from both bounds se itself."""
    truth = np.array([0.0, 0.01, 0.05, 0.5, 1.0])
    se = np.full(5, 0.01)
    draws = truth + se * np.random.default_rng(3).standard_normal((200_000, 5))
    mc = np.sqrt(np.mean((np.clip(draws, 0.0, 1.0) - truth) ** 2, axis=0))
    # the sd of an RMSE over R draws is about rmse / sqrt(2R): 4 sd is 0.6%
    np.testing.assert_allclose(clipped_rmse(truth, se, 0.0, 1.0), mc, rtol=0.01)
    assert clipped_rmse(np.array([0.0]), np.array([1.0]), 0.0, 100.0)[0] == pytest.approx(np.sqrt(0.5))
    assert clipped_rmse(np.array([0.2]), np.array([0.0]), 0.0, 1.0)[0] == 0.0


@pytest.mark.parametrize(
    ("name", "estimator", "epsilon"),
    [
        ("pckv_grr", "unbiased", 2.0),
        ("pckv_grr", "paper", 2.0),
        ("pckv_grr", "em", 2.0),
        ("pckv_ue", "em", 4.0),
    ],
)
def test_intervals_cover_and_standard_errors_match_the_errors(
    name: str, estimator: str, epsilon: float
) -> None:
    """One pair per device (d = 50, n = 100,000), 24 collections."""
    users = datasets.generate("gaussian_pckv", 100_000, 50, 0).users
    cal = calibrate(create(name, 50, epsilon), estimator, users, 24, 1)
    assert cal.mean is not None
    for quantity in (cal.frequency, cal.mean):
        bounded = quantity.pairs * quantity.answered * quantity.with_stderr  # pairs with an interval
        assert abs(quantity.coverage - 0.95) <= 4 * np.sqrt(0.95 * 0.05 / bounded), quantity
    assert abs(cal.frequency.ratio - 1.0) <= 0.15, cal.frequency
    if estimator != "paper":  # paper's unestimable means have no standard error: no ratio
        assert abs(cal.mean.ratio - 1.0) <= 0.15, cal.mean


def test_a_key_nobody_holds_has_no_mean_and_a_key_with_negative_holders_neither() -> None:
    """Fieller's set is bounded when D is significantly negative too: the model says D >= 0,
    so such a key is not estimable either; both are counted."""
    mech = create("pckv_grr", 3, 2.0)
    n = 100_000
    base = round(n * mech.b / 2)
    arrays = {
        "n1": np.array([base + 3000, base, base - 2000]),
        "n2": np.array([base + 1000, base, base - 2000]),
        "n": np.array([n]),
    }
    est = mech.estimate(Stats(mech, arrays), "unbiased")
    assert np.isfinite(est.mean[0]) and np.isnan(est.mean[1:]).all()
    assert est.diagnostics["not_estimable_means"] == 2
    lo, hi = est.mean_interval
    assert lo[0] <= est.mean[0] <= hi[0] and np.isnan(lo[1:]).all()
