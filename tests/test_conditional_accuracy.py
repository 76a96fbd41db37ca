"""Conditional analysis accuracy: IOH, IOH with OUE bits and low-order Hadamard.

Fixed seeds; every tolerance is a fixed acceptance bound or derives from a variance:
the standard error of a Monte-Carlo MSE (from its repeats), sqrt(2/R) for an
empirical variance ratio, the binomial spread of an interval's coverage.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from kvldp.common.estimation.conditional import ConditionalEstimate, ConditionalQuery, conditional_truths
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.ioh import JointStateMechanism
from kvldp.evaluation.calibration import QuantityCalibration, summarise
from kvldp.sim.datasets import generate


def two_way(d: int) -> list[ConditionalQuery]:
    """Every 2-way query f(k | j=1) and f(k | j=0), k != j."""
    return [
        ConditionalQuery.build(d, k, {j: v}) for k in range(d) for j in range(d) if j != k for v in (1, 0)
    ]


def frequencies(mech: JointStateMechanism, stats: object, queries: list[ConditionalQuery]) -> np.ndarray:
    return np.array([a.frequency for a in mech.conditional_many(stats, queries)])  # type: ignore[arg-type]


def test_ioh_answers_every_two_way_query_within_two_hundredths() -> None:
    """d = 4, n = 1e6, eps = 2: each of the 24 two-way conditional frequencies within 0.02."""
    data = generate("conditional", 1_000_000, 4, seed=1).users
    queries = two_way(4)
    truth = np.array(conditional_truths(data, queries))[:, 0]
    mech = create("ioh", 4, 2.0)
    assert isinstance(mech, JointStateMechanism)
    errors = np.abs(frequencies(mech, mech.collect(data, np.random.default_rng(1)), queries) - truth)
    assert np.all(errors < 0.02), errors.max()


def test_oue_bits_beat_sue_bits_by_the_analytic_ratio() -> None:
    """Same data, 10 collections each: MSE(ioh_oue) <= MSE(ioh), and the MSE ratio agrees with
    the ratio of the analytic variances within 4 standard errors of the measured ratio."""
    d, repeats = 4, 10
    data = generate("conditional", 1_000_000, d, seed=1).users
    queries = two_way(d)
    truth = np.array(conditional_truths(data, queries))[:, 0]
    rng = np.random.default_rng(7)
    measured, analytic, se = {}, {}, {}
    for name in ("ioh", "ioh_oue"):
        mech = create(name, d, 2.0)
        assert isinstance(mech, JointStateMechanism)
        per_repeat = [
            np.mean((frequencies(mech, mech.collect(data, rng), queries) - truth) ** 2)
            for _ in range(repeats)
        ]
        measured[name] = float(np.mean(per_repeat))
        se[name] = float(np.std(per_repeat, ddof=1) / math.sqrt(repeats))
        exact = mech.conditional_many(mech.expected_stats(data), queries)
        analytic[name] = float(np.mean([a.frequency_stderr**2 for a in exact]))
    ratio = measured["ioh_oue"] / measured["ioh"]
    ratio_se = ratio * math.hypot(se["ioh_oue"] / measured["ioh_oue"], se["ioh"] / measured["ioh"])
    expected = analytic["ioh_oue"] / analytic["ioh"]
    assert measured["ioh_oue"] <= measured["ioh"]
    assert expected < 1
    assert abs(ratio - expected) < 4 * ratio_se, (ratio, expected, ratio_se)


def test_low_order_hadamard_is_at_least_ten_times_better_at_d8() -> None:
    """d = 8, eps = 1, n = 2e5: MSE over all 112 two-way queries (2 collections each);
    the noise of a two-key count is analytically about 47x below IOH's per-bit SUE
    (docs/mechanisms.md, *Low-order Hadamard responses*)."""
    d = 8
    data = generate("conditional", 200_000, d, seed=2).users
    queries = two_way(d)
    truth = np.array(conditional_truths(data, queries))[:, 0]
    rng = np.random.default_rng(8)
    mse = {}
    for name in ("ioh", "ioh_hrr"):
        mech = create(name, d, 1.0)
        assert isinstance(mech, JointStateMechanism)
        mse[name] = float(
            np.mean(
                [
                    np.nanmean((frequencies(mech, mech.collect(data, rng), queries) - truth) ** 2)
                    for _ in range(2)
                ]
            )
        )
    assert mse["ioh"] >= 10 * mse["ioh_hrr"], mse


@pytest.mark.parametrize("name", ["ioh", "ioh_oue", "ioh_hrr"])
def test_empirical_variance_within_twenty_percent_of_the_formula(name: str) -> None:
    """R = 800 collections (sd of a variance ratio: sqrt(2/R) = 5%, so +-20% is a 4-sd band)
    at a setting where the delta method is accurate: conditional frequencies and means."""
    d, repeats = 3, 800
    data = generate("conditional", 20_000, d, seed=3).users
    queries = [
        ConditionalQuery.build(d, 1, {0: 1}),
        ConditionalQuery.build(d, 2, {1: 0}),
        ConditionalQuery.build(d, 0),
    ]
    mech = create(name, d, 4.0)
    assert isinstance(mech, JointStateMechanism)
    exact = mech.conditional_many(mech.expected_stats(data), queries)
    f_var = np.array([a.frequency_stderr**2 for a in exact])
    m_var = np.array([a.mean_stderr**2 for a in exact])
    rng = np.random.default_rng(9)
    draws = [mech.conditional_many(mech.collect(data, rng), queries) for _ in range(repeats)]
    f = np.array([[a.frequency for a in row] for row in draws])
    m = np.array([[a.mean for a in row] for row in draws])
    truth = np.array(conditional_truths(data, queries))
    assert np.all(np.abs(f.mean(axis=0) - truth[:, 0]) < 4 * np.sqrt(f_var / repeats))
    assert np.all(np.abs(f.var(axis=0, ddof=1) / f_var - 1) < 0.2), f.var(axis=0, ddof=1) / f_var
    assert np.all(np.abs(m.var(axis=0, ddof=1) / m_var - 1) < 0.2), m.var(axis=0, ddof=1) / m_var


def error_bars(
    mech: JointStateMechanism, estimator: str, repeats: int, n: int, seed: int
) -> tuple[QuantityCalibration, QuantityCalibration]:
    """Coverage and stderr/RMSE of the conditional frequencies and means of every 1- and
    2-way query over ``repeats`` collections of the ``conditional`` population."""
    d = mech.d
    data = generate("conditional", n, d, seed=seed).users
    queries = [ConditionalQuery.build(d, k) for k in range(d)] + two_way(d)
    truth = np.array(conditional_truths(data, queries))
    rng = np.random.default_rng(seed + 1)
    rows = [mech.conditional_many(mech.collect(data, rng), queries, estimator) for _ in range(repeats)]

    def column(get: Callable[[ConditionalEstimate], float]) -> np.ndarray:
        return np.array([[get(a) for a in row] for row in rows])

    freq = summarise(
        column(lambda a: a.frequency),
        column(lambda a: a.frequency_stderr),
        column(lambda a: a.frequency_interval[0]),
        column(lambda a: a.frequency_interval[1]),
        truth[:, 0],
    )
    mean = summarise(
        column(lambda a: a.mean),
        column(lambda a: a.mean_stderr),
        column(lambda a: a.mean_interval[0]),
        column(lambda a: a.mean_interval[1]),
        truth[:, 1],
    )
    return freq, mean


@pytest.mark.parametrize("name", ["ioh", "ioh_hrr"])
def test_conditional_error_bars_are_calibrated(name: str) -> None:
    """eps = 4, n = 10,000, d = 4, R = 120 collections x 28 queries: coverage within 4 sd
    of its binomial spread, sqrt(0.95 0.05 / pairs), of 0.95, and the median stderr/RMSE
    within 2 sd of one key's ratio, 1/sqrt(2R), of 1 (the median of 28 keys spreads less)."""
    repeats = 120
    for quantity in error_bars(create(name, 4, 4.0), "unbiased", repeats, 10_000, seed=11):  # type: ignore[arg-type]
        assert quantity.answered == 1.0
        assert abs(quantity.coverage - 0.95) <= 4 * math.sqrt(0.95 * 0.05 / quantity.pairs), quantity
        assert abs(quantity.ratio - 1.0) <= 2 / math.sqrt(2 * repeats), quantity


def test_normsub_conditional_error_bars_are_never_narrow() -> None:
    """The projected point keeps the unbiased basis's intervals (widened to hold it): at
    eps = 2, coverage at least 0.95 less 4 sd and stderr/RMSE at least 1 less 2 sd
    (a projected point errs less than the basis it is bounded by)."""
    repeats = 120
    for quantity in error_bars(create("ioh", 4, 2.0), "normsub", repeats, 10_000, seed=12):  # type: ignore[arg-type]
        assert quantity.coverage >= 0.95 - 4 * math.sqrt(0.95 * 0.05 / quantity.pairs), quantity
        assert quantity.ratio >= 1.0 - 2 / math.sqrt(2 * repeats), quantity
