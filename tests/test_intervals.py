"""The 95% intervals of :mod:`kvldp.common.estimation.intervals`: clipped intervals, Fieller's set for a
ratio against a brute-force grid, and its coverage by simulation (docs/mechanisms.md,
*Calibration of standard errors*)."""

from __future__ import annotations

import math

import numpy as np

from kvldp.common.estimation.estimate import Z95
from kvldp.common.estimation.intervals import clipped_interval, fieller_interval, interval_stderr


def test_clipped_interval_keeps_the_range_and_collapses_outside_it() -> None:
    raw = np.array([0.5, 0.01, -0.5, 1.4, np.nan])
    se = np.array([0.1, 0.02, 0.1, 0.1, 0.1])
    lo, hi = clipped_interval(raw, se)
    np.testing.assert_allclose(lo[:4], [0.5 - Z95 * 0.1, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(hi[:4], [0.5 + Z95 * 0.1, 0.01 + Z95 * 0.02, 0.0, 1.0])
    assert np.isnan(lo[4]) and np.isnan(hi[4])
    np.testing.assert_allclose(interval_stderr(lo, hi)[:2], [0.1, (0.01 + Z95 * 0.02) / (2 * Z95)])


def test_fieller_matches_the_set_it_defines_on_a_grid() -> None:
    rng = np.random.default_rng(5)
    k = 200
    den = rng.uniform(-0.2, 1.0, k)
    num = den * rng.uniform(-1.3, 1.3, k)
    var_den = rng.uniform(0.001, 0.1, k)
    var_num = rng.uniform(0.001, 0.1, k)
    cov = rng.uniform(-0.9, 0.9, k) * np.sqrt(var_den * var_num)
    lo, hi, estimable = fieller_interval(num, den, var_num, var_den, cov)
    grid = np.linspace(-1.0, 1.0, 20_001)
    step = grid[1] - grid[0]
    for i in range(k):
        inside = (num[i] - grid * den[i]) ** 2 <= Z95**2 * (
            var_num[i] - 2 * grid * cov[i] + grid**2 * var_den[i]
        )
        significant = den[i] > 0 and den[i] ** 2 > Z95**2 * var_den[i]
        assert estimable[i] == significant
        if not significant:
            assert np.isnan(lo[i]) and np.isnan(hi[i])
        elif inside.any():
            assert abs(lo[i] - grid[inside].min()) <= step and abs(hi[i] - grid[inside].max()) <= step
        else:  # a bounded set wholly outside [-1, 1] collapses onto the nearer end
            assert lo[i] == hi[i] and abs(lo[i]) == 1.0


def test_fieller_covers_a_ratio_95_percent_of_the_time() -> None:
    """(N, D) jointly normal with D 6 standard deviations from 0 and correlation 0.3:
    over 20,000 draws the set holds N/D for 0.95 of them, within 4 sd of a proportion."""
    rng = np.random.default_rng(8)
    draws, m, d, sd_n, sd_d, rho = 20_000, -0.6, 0.3, 0.04, 0.05, 0.3
    cov = np.array([[sd_n**2, rho * sd_n * sd_d], [rho * sd_n * sd_d, sd_d**2]])
    nd = rng.multivariate_normal([m * d, d], cov, draws)
    full = np.full(draws, 1.0)
    lo, hi, estimable = fieller_interval(
        nd[:, 0], nd[:, 1], full * sd_n**2, full * sd_d**2, full * cov[0, 1], -math.inf, math.inf
    )
    assert estimable.all()
    coverage = float(np.mean((lo <= m) & (m <= hi)))
    assert abs(coverage - 0.95) < 4 * math.sqrt(0.95 * 0.05 / draws), coverage
