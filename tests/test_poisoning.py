"""The poisoning tests of :mod:`kvldp.common.untrusted.poisoning`: the state counts are exactly
unbiased for every key-value mechanism, their standard errors are right, the score's
false-alarm rate on genuine populations is the computed one, and what has no basis is
refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import StatsMismatch
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.untrusted.poisoning import (
    ALERT_SCORE,
    MAX_SCORE,
    false_alarm_rate,
    log10_normal_cdf,
    poisoning_reports,
    score,
)
from kvldp.common.untrusted.poisoning_states import StateShares, covers, state_shares
from kvldp.sim.datasets import generate

KEY_VALUE = [
    "privkv",
    "kvue",
    "f2m",
    "kvoh",
    "kvue_multi",
    "pckv_grr",
    "pckv_ue",
    "ioh",
    "ioh_oue",
    "ioh_hrr",
]


def true_shares(users: KVData) -> np.ndarray:
    """(d, 3) shares of the devices in state <k,-1>, absent, <k,+1> (Disc in expectation)."""
    n, d = users.n_users, users.d
    holders = np.bincount(users.keys, minlength=d).astype(float)
    up = np.bincount(users.keys, weights=(1.0 + users.values) / 2.0, minlength=d)
    return np.stack([holders - up, n - holders, up], axis=1) / n


def test_normal_tail_is_accurate_and_continuous() -> None:
    z = np.array([0.0, -1.0, -5.0, -29.99999, -30.00001, -40.0, np.nan, np.inf, -np.inf])
    got = log10_normal_cdf(z)
    assert got[0] == pytest.approx(math.log10(0.5))
    assert got[1] == pytest.approx(math.log10(0.15865525393145707), rel=1e-12)
    assert got[2] == pytest.approx(math.log10(2.866515718791939e-07), rel=1e-12)
    # the two branches meet (Mills-ratio series below -30)
    assert got[3] == pytest.approx(got[4], abs=1e-3)
    # log10 Phi(-40) = -349.43...: from Phi(-40) = 3.655893540915e-350
    assert got[5] == pytest.approx(math.log10(3.655893540915) - 350, abs=1e-5)
    assert np.isnan(got[6]) and got[7] == 0.0 and got[8] == -np.inf


@pytest.mark.parametrize("name", [*KEY_VALUE, "privkvm"])
def test_state_shares_are_exact_on_expected_statistics(name: str) -> None:
    users = generate("gaussian_pckv", 3000, 6, seed=2).users
    mech = create(name, 6, 1.0)
    shares = state_shares(mech, mech.expected_stats(users))
    truth = true_shares(users)
    measured = ~np.isnan(shares.share)
    assert measured[:, [0, 2]].all()  # every mechanism counts both holder states
    np.testing.assert_allclose(shares.share[measured], truth[measured], atol=1e-12)
    assert np.all(shares.stderr[measured] > 0)
    if name.startswith("pckv"):  # one pair per device: nobody pads
        assert shares.population["padded_share"][0] == pytest.approx(0.0, abs=1e-12)
        assert shares.population["sampled_share"][0] == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name", ["privkv", "pckv_ue", "ioh"])
def test_state_standard_errors_match_the_spread(name: str) -> None:
    """The standard error of each state share against its spread over 150 collections:
    the ratio of variances is within the chi-square band (4 sd of 150 - 1 degrees)."""
    users = generate("gaussian_pckv", 4000, 4, seed=3).users
    mech = create(name, 4, 2.0)
    runs = 150
    draws = np.array(
        [state_shares(mech, mech.collect(users, np.random.default_rng([i, 5]))).share for i in range(runs)]
    )
    predicted = state_shares(mech, mech.expected_stats(users)).stderr
    measured = ~np.isnan(predicted)
    ratio = draws.var(axis=0, ddof=1)[measured] / predicted[measured] ** 2
    band = 4 * math.sqrt(2 / (runs - 1))
    assert np.all(np.abs(ratio - 1) < band), ratio


def test_refuses_what_it_cannot_test() -> None:
    oracle = create("grr", 5, 1.0)
    assert not covers(oracle)
    with pytest.raises(TypeError, match="no state-count basis"):
        state_shares(oracle, oracle.new_stats())
    assert poisoning_reports(oracle, {"all": oracle.new_stats()}, None, "all") == {}
    mech, other = create("kvue", 5, 1.0), create("kvue", 5, 2.0)
    with pytest.raises(StatsMismatch):
        state_shares(mech, other.new_stats())


def test_empty_statistics_score_nothing() -> None:
    for name in ("kvue", "pckv_ue", "ioh"):
        mech = create(name, 3, 1.0)
        report = poisoning_reports(mech, {"all": mech.new_stats()}, None, "all")["all"]
        assert report.tests == 0 and report.score == 0.0 and np.isnan(report.key_score).all()


def test_score_scale() -> None:
    """One violated count among K tests: score = -log10(K p), capped, never negative."""
    share = np.array([[-0.3, 0.5, 0.8], [0.3, 0.8, 0.1]])
    se = np.full((2, 3), 0.1)
    report = score(StateShares(share, se, {"padded_share": (-1.0, 0.01)}))
    assert report.tests == 7 and report.jump_tests == 0
    expected = -(float(log10_normal_cdf(np.array([-3.0]))[0]) + math.log10(7))
    assert report.key_score[0] == pytest.approx(expected)
    assert report.key_test == ("state_neg", "state_pos")
    assert report.key_score[1] == 0.0
    assert report.population_score == pytest.approx(MAX_SCORE) or report.population_score > 100
    assert report.population_test == "padded_share"
    assert report.score == report.population_score
    keys = ("a", "b")
    payload = report.to_json(keys)
    assert payload["alert_score"] == ALERT_SCORE and set(payload["keys"]) == set(keys)  # type: ignore[arg-type]


def boundary_population(n: int, d: int, rng: np.random.Generator) -> KVData:
    """Every held value is +1 (no device in state <k,-1>) and half the keys are held by
    nobody: the most counts at 0, where a genuine population alarms the most."""
    keys = rng.integers(0, d // 2, size=n)
    return KVData.from_single_key(d, keys, np.ones(n))


POPULATIONS = {
    "gaussian_pckv": lambda n, d: generate("gaussian_pckv", n, d, seed=4).users,
    "boundary": lambda n, d: boundary_population(n, d, np.random.default_rng(4)),
}


def alarm_counts(
    mech: Mechanism, users: KVData, runs: int, thresholds: tuple[float, ...]
) -> tuple[np.ndarray, int]:
    """Alarms (any key or the population at or above each threshold) in ``runs`` refits of
    a two-window snapshot: the newest 20% of the devices and all of them; and the jump
    tests per refit."""
    cut = int(0.8 * users.n_users)
    old, new = users.rows(0, cut), users.rows(cut, users.n_users)
    alarms = np.zeros(len(thresholds), dtype=int)
    jumps = 0
    for i in range(runs):
        rng = np.random.default_rng([i, 17])
        recent = mech.collect(new, rng)
        whole = mech.collect(old, rng).add(recent)
        report = poisoning_reports(mech, {"recent": recent, "all": whole}, "recent", "all")["recent"]
        alarms += np.array([report.score >= t for t in thresholds])
        jumps = report.jump_tests
    return alarms, jumps


@pytest.mark.parametrize("population", sorted(POPULATIONS))
@pytest.mark.parametrize("name", ["privkv", "pckv_grr", "pckv_ue"])
def test_false_alarm_rate_is_the_computed_one(population: str, name: str) -> None:
    """Genuine reports, 300 refits: the alarms at scores 0.5 and 1 are at most the
    computed rate plus 4 binomial standard deviations, and that rate is within
    Bonferroni's bound. (The computed rate treats the tests as independent normals; the
    states of one key are correlated and a count at 0 has a lighter lower tail than the
    normal, so the measured rate runs below it: 55-90% of it here.)"""
    n, d, runs, thresholds = 20_000, 12, 300, (0.5, 1.0)
    users = POPULATIONS[population](n, d)
    mech = create(name, d, 1.0)
    alarms, jumps = alarm_counts(mech, users, runs, thresholds)
    cut = int(0.8 * n)
    expected = state_shares(mech, mech.expected_stats(users.rows(cut, n)))
    for threshold, count in zip(thresholds, alarms, strict=True):
        rate = false_alarm_rate(expected, threshold, jumps=jumps)
        assert rate <= 10**-threshold * (1 + 1e-9)
        sd = math.sqrt(runs * rate * (1 - rate))
        assert count <= runs * rate + 4 * sd + 1, (threshold, count, runs * rate)
    assert false_alarm_rate(expected, ALERT_SCORE, jumps=jumps) <= 10**-ALERT_SCORE
