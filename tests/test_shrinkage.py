"""Empirical-Bayes shrinkage (:mod:`kvldp.common.estimation.shrinkage`) on the normal-normal model it
assumes: the fitted prior, the gain over the raw estimates, and standard errors that
match the errors where the prior's spread is identified and are not understated where
it is not.

Tolerances: with K keys, the RMS of K standardised errors has sd ~ 1/sqrt(2K); the fitted
mu has sd ~ sqrt(1/sum w) and tau^2 ~ sqrt(2/sum w^2); bands are 4 of those.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from kvldp.common.estimation.shrinkage import Shrunk, fit_prior, shrink


def draw(keys: int, mu: float, tau: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(truth, estimates, variances) with variances spread over two orders of magnitude."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(mu, tau, keys)
    var = np.exp(rng.uniform(np.log(0.01), np.log(1.0), keys))
    return truth, truth + rng.normal(0.0, np.sqrt(var)), var


def test_fitted_prior_and_gain() -> None:
    truth, x, var = draw(4000, 0.3, 0.5, 1)
    mu, tau2 = fit_prior(x, var)
    w = 1.0 / (var + tau2)
    assert abs(mu - 0.3) < 4 * math.sqrt(1.0 / w.sum())
    assert abs(tau2 - 0.25) < 4 * math.sqrt(2.0 / np.sum(w**2))
    out = shrink(x, var, -10.0, 10.0)
    raw, shrunk = np.mean((x - truth) ** 2), np.mean((out.value - truth) ** 2)
    # the Bayes risk mean((1-B) s^2) against mean(s^2)
    big_b = var / (var + 0.25)
    assert shrunk < raw
    assert abs(shrunk / np.mean((1 - big_b) * var) - 1) < 4 * math.sqrt(2 / 4000)


def test_standard_errors_match_where_the_spread_is_identified() -> None:
    truth, x, var = draw(4000, 0.0, 0.5, 2)
    out = shrink(x, var, -10.0, 10.0)
    z = (out.value - truth) / np.sqrt(out.variance)
    rms = math.sqrt(np.mean(z**2))
    # not understated: within 4 sd (1/sqrt(2K)) above 1; below 1 by at most the widening from
    # taking tau^2 at its upper end (tau^2 + 2 sd, a few percent of the variance here)
    assert 0.9 < rms < 1 + 4 / math.sqrt(2 * 4000), rms


def test_unidentified_spread_is_not_taken_as_zero() -> None:
    """Every key's noise far above the true spread: the fit cannot see tau (often 0), the
    estimates collapse to mu, and the standard errors still cover the true spread."""
    rng = np.random.default_rng(3)
    keys = 100
    truth = rng.uniform(-1.0, 1.0, keys)
    var = np.full(keys, 25.0)
    x = np.clip(truth + rng.normal(0.0, 5.0, keys), -1.0, 1.0)
    out = shrink(x, var, -1.0, 1.0)
    z = (out.value - truth) / np.sqrt(out.variance)
    assert math.sqrt(np.mean(z**2)) < 1.0
    assert np.all(np.abs(out.value) <= 1.0)


def test_no_information_gets_the_prior() -> None:
    _, x, var = draw(200, 0.2, 0.4, 4)
    x[:5] = np.nan
    var[5:10] = np.inf
    out = shrink(x, var, -10.0, 10.0)
    np.testing.assert_allclose(out.value[:10], out.prior_mean)
    assert np.all(np.isfinite(out.variance))
    # at least the prior's spread, at most the upper end plus the uncertainty of mu
    assert np.all(out.variance[:10] >= out.prior_variance)
    assert np.all(np.isfinite(out.value))


def test_equal_values_shrink_to_their_common_value() -> None:
    """All truths equal (PCKV's UU frequencies): tau^2 fits ~0 and every key moves to mu, far
    closer to the truth than its own estimate; the standard errors stay above the errors."""
    rng = np.random.default_rng(5)
    var = np.full(100, 1e-4)
    x = 0.01 + rng.normal(0.0, 1e-2, 100)
    out = shrink(x, var, 0.0, 1.0)
    # every key at mu, whose error has sd s/sqrt(K): within 4 sd of it, against s^2 raw
    assert np.mean((out.value - 0.01) ** 2) < 16 * 1e-4 / 100
    z = (out.value - 0.01) / np.sqrt(out.variance)
    assert math.sqrt(np.mean(z**2)) < 1.0


def test_a_centre_that_moves_with_a_covariate_is_fitted_as_a_line() -> None:
    """Truth t_k = 2 z_k - 1 + N(0, 0.1^2) clipped into [-1, 1], z_k in (0, 1], and the keys
    with small z are the noisy ones (Var = 0.01 / z), as means against frequency are.
    Fitting one centre on the precise keys only (``fit_below``) puts it near their t
    (high z) and drags every noisy key there: worse than the raw estimates clipped into
    [-1, 1]. With z as the covariate the prior's line is recovered (slope within 4 sd),
    the squared error falls below the raw one, and the standard errors are not
    understated (RMS of the standardised errors below 1 + 4/sqrt(2K))."""
    keys = 4000
    rng = np.random.default_rng(7)
    z = rng.uniform(0.01, 1.0, keys)
    truth = np.clip(2 * z - 1 + rng.normal(0.0, 0.1, keys), -1.0, 1.0)
    var = 0.01 / z
    x = truth + rng.normal(0.0, np.sqrt(var))
    raw = np.mean((np.clip(x, -1.0, 1.0) - truth) ** 2)
    one_centre = shrink(x, var, -1.0, 1.0, fit_below=0.02)
    assert np.mean((one_centre.value - truth) ** 2) > raw
    line = shrink(x, var, -1.0, 1.0, fit_below=0.02, covariate=z)
    fit = var <= 0.02
    w = 1.0 / (var[fit] + 0.01)
    sd_slope = math.sqrt(1.0 / np.sum(w * (z[fit] - np.average(z[fit], weights=w)) ** 2))
    assert abs(line.prior_slope - 2.0) < 4 * sd_slope
    assert np.mean((line.value - truth) ** 2) < raw
    rms = math.sqrt(np.mean((line.value - truth) ** 2 / line.variance))
    assert rms < 1 + 4 / math.sqrt(2 * keys)


def test_a_batch_is_shrunk_row_by_row() -> None:
    """Rows of a batch (R, d), the draws of a prediction, are shrunk each toward its own
    prior, as each would be alone, through every special case of the fit: a row without
    any usable key, with one, with two (too few for the line), with exact estimates
    (s^2 = 0), with one value of the covariate (a line the keys cannot identify), with noise far
    above the spread (unidentified), with holes in estimates, variances and covariate; and
    the line fitted where the keys identify it."""
    rng = np.random.default_rng(8)
    rows, keys = 9, 40
    z = rng.uniform(0.01, 1.0, (rows, keys))
    var = 0.01 / z
    x = 2 * z - 1 + rng.normal(0.0, np.sqrt(var))
    x[0] = np.nan
    x[1, 1:] = np.nan
    x[2, 2:] = np.nan
    var[3, :5] = 0.0
    z[4] = 0.5
    var[5] = 25.0
    x[6, ::3] = np.nan
    z[6, 1::5] = np.nan
    var[7, :4] = np.inf
    own = var * rng.uniform(0.5, 2.0, (rows, keys))
    for fit_below, covariate in ((None, None), (0.05, z)):
        batch = shrink(x, var, -1.0, 1.0, own, fit_below, covariate)
        for r in range(rows):
            alone = shrink(x[r], var[r], -1.0, 1.0, own[r], fit_below, None if covariate is None else z[r])
            for field in fields(Shrunk):
                np.testing.assert_allclose(
                    getattr(batch, field.name)[r], getattr(alone, field.name), rtol=1e-12, atol=0
                )
        lines = batch.prior_slope != 0
        assert not lines[:3].any() and lines.any() == (covariate is not None)
