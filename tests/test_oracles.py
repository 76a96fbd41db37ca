"""Frequency oracles: GRR's closed-form MLE, OLH's hash, HR, FHR's worked numbers, FLDP and
the calibration of the error bars of projected and MLE frequencies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.channel.output_model import DenseModel
from kvldp.common.data.kvdata import InvalidUserData, KVData
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.em import em_counts
from kvldp.common.estimation.estimate import Z95
from kvldp.common.guarantees.privacy_audit import audit, max_log_ratio
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.fhr import FHR
from kvldp.common.mechanisms.grr import GRR, grr_mle
from kvldp.common.mechanisms.olh import olh_hash
from kvldp.common.primitives import fwht, hadamard_entry, mix64
from kvldp.common.spec.params import InvalidParameter
from kvldp.evaluation.calibration import calibrate
from kvldp.sim.datasets import generate


def test_grr_closed_form_mle_is_the_em_fixed_point() -> None:
    """Water-filling MLE == count EM at a tight tolerance, including boundary (zero) states."""
    rng = np.random.default_rng(21)
    mech = create("grr", 12, 0.8)
    assert isinstance(mech, GRR)
    weights = np.array([40.0, 30, 20, 10, 5, 3, 2, 1, 0, 0, 0, 0, 0])
    items = rng.choice(13, size=600, p=weights / weights.sum())
    users = KVData.from_single_key(12, np.where(items == 12, -1, items), np.zeros(600))
    counts = mech.collect(users, rng).arrays["counts"].astype(float)
    closed = grr_mle(counts, mech.p, mech.q)
    iterated = em_counts(mech.transition(), counts[None, :], tol=1e-14, max_iter=500_000).theta[0]
    assert np.sum(closed == 0) >= 3  # the case that needs water-filling
    np.testing.assert_allclose(closed, iterated, atol=1e-7)
    assert closed.sum() == pytest.approx(1.0) and np.all(closed >= 0)
    est = mech.estimate(Stats(mech, {"counts": counts.astype(np.int64), "n": np.array([600])}), "em")
    np.testing.assert_allclose(est.frequency, closed[:12], atol=1e-12)


@pytest.mark.parametrize(("epsilon", "g"), [(0.5, 3), (1.0, 4), (2.0, 8), (4.0, 56)])
def test_olh_hash_range_follows_the_corrected_rule(epsilon: float, g: int) -> None:
    assert create("olh", 10, epsilon).g == g  # round(e^eps + 1), not Zhao et al. 2022's ceil(eps + 1)
    assert create("olh", 10, epsilon, g=5).g == 5


def test_olh_hash_is_deterministic_and_uniform() -> None:
    seeds = np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64)
    first = olh_hash(seeds, np.zeros(4, dtype=np.uint64), 1 << 30)
    assert first.tolist() == olh_hash(seeds, np.zeros(4, dtype=np.uint64), 1 << 30).tolist()
    # the wire hash, re-implemented with Python integers: devices and aggregators must agree
    mask = (1 << 64) - 1

    def reference(seed: int, item: int) -> int:
        z = seed ^ (((item + 1) * 0x9E3779B97F4A7C15) & mask)
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    for seed in (0, 1, 2**63, 2**64 - 1, 0x1234_5678_9ABC_DEF0):
        for item in (0, 1, 1022):
            got = mix64(np.array([seed], dtype=np.uint64), np.array([item], dtype=np.uint64))[0]
            assert int(got) == reference(seed, item)
    rng = np.random.default_rng(22)
    s = rng.integers(0, 2**64, size=200_000, dtype=np.uint64)
    g = 7
    a = olh_hash(s, np.full(s.shape, 3, dtype=np.uint64), g)
    b = olh_hash(s, np.full(s.shape, 4, dtype=np.uint64), g)
    counts = np.bincount(a, minlength=g)
    z = (counts - s.shape[0] / g) / math.sqrt(s.shape[0] * (1 / g) * (1 - 1 / g))
    assert np.all(np.abs(z) < 5)
    collisions = np.mean(a == b)
    assert abs(collisions - 1 / g) < 5 * math.sqrt((1 / g) * (1 - 1 / g) / s.shape[0])


def test_hr_transition_and_estimates() -> None:
    mech = create("hr", 5, 1.2)
    p = mech.transition()
    assert p.shape == (8, 6)  # K = 2^ceil(log2(7)) outputs, d + 1 items
    np.testing.assert_allclose(p.sum(axis=0), 1.0)
    assert audit(mech, exhaustive=False).tight
    users = KVData.from_pairs(5, [{0: 0.1}] * 300 + [{3: 0.0}] * 500 + [{}] * 200)
    expected = mech.expected_stats(users)
    np.testing.assert_allclose(expected.arrays["counts"], p @ mech.item_totals(users))


def test_fhr_worked_numbers() -> None:
    mech = create("fhr", 3, 1.0, ell=0)
    assert isinstance(mech, FHR)
    assert (mech.r, mech.length) == (2, 4)
    rows = hadamard_entry(np.arange(1, 4)[:, None], np.arange(4)[None, :])
    assert rows.tolist() == [[1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
    users = KVData.from_pairs(3, [{0: 0.0}] * 5 + [{1: 0.0}] * 3 + [{2: 0.0}] * 2)
    expected = mech.expected_stats(users)
    np.testing.assert_allclose(
        expected.arrays["z"], [2.3105857863000487, -0.9242343145200196, 0.0, -1.3863514717800294], atol=1e-12
    )
    assert mech.c == pytest.approx(1.0819767068693265, abs=1e-15)
    np.testing.assert_allclose(mech.count_estimate(expected.arrays), [5, 3, 2], atol=1e-12)
    single = mech.new_stats().fold({"x": np.array([0]), "y": np.array([1])})
    np.testing.assert_allclose(single.arrays["z"], [1, -1, 0, 0])
    np.testing.assert_allclose(mech.count_estimate(single.arrays), [2.16395, 0, 2.16395], atol=1e-5)
    var = mech.count_variance(10.0, np.array([5.0]))
    assert var[0] == pytest.approx(30.120207826, abs=1e-8)


def test_fhr_is_fldp_only_and_refuses_sampling() -> None:
    mech = create("fhr", 6, 1.0)
    result = audit(mech)
    assert result.notion == "fldp" and result.eta == pytest.approx(0.5) and result.ok
    # as an LDP mechanism FHR has unbounded ratio: outputs outside the common support
    model = mech.audit_model(exhaustive=False)
    assert isinstance(model, DenseModel)
    assert max_log_ratio(model)[0] == math.inf
    with pytest.raises(InvalidUserData, match="at most one key"):
        mech.perturb({0: 0.1, 1: 0.2}, np.random.default_rng(0))
    with pytest.raises(InvalidParameter, match="fhr takes ell = 0 or 1"):
        create("fhr", 6, 1.0, ell=2)


def test_fldp_does_not_survive_mixing_inputs() -> None:
    """Why FHR refuses devices with several keys: a device sampling item 0 or 'none' half the
    time exceeds e^eps against item 1 on their common support."""
    mech = create("fhr", 6, 1.0)
    items = mech.audit_model(exhaustive=True)
    assert isinstance(items, DenseModel)
    rows = items.probs
    mixture = 0.5 * rows[0] + 0.5 * rows[-1]  # item 0 / none
    model = DenseModel(np.stack([mixture, rows[1]]), ("{0 or none}", "{1}"))
    assert max_log_ratio(model, restrict_to_common=True)[0] > 1.0 + 0.5


def test_classic_oracles_need_exactly_one_key() -> None:
    for name in ("grr", "oue", "sue", "olh", "hr"):
        mech = create(name, 4, 1.0, ell=0)
        with pytest.raises(InvalidUserData, match="exactly one key"):
            mech.perturb({}, np.random.default_rng(0))
        assert mech.domain == 4


@pytest.mark.parametrize("name", ["grr", "oue", "sue", "olh", "hr"])
def test_padding_with_ell_two_is_unbiased_for_two_key_users(name: str) -> None:
    mech = create(name, 4, 1.5, ell=2)
    users = KVData.from_pairs(
        4, [{0: 0.1, 1: 0.3}] * 300 + [{2: 0.0}] * 500 + [{}] * 200 + [{1: 0.0, 3: 0.5}] * 100
    )
    est = mech.estimate(mech.expected_stats(users))
    np.testing.assert_allclose(est.frequency, users.truth()[0], atol=1e-12)
    assert audit(mech, exhaustive=True).max_log_ratio == pytest.approx(
        audit(mech, exhaustive=False).max_log_ratio, abs=1e-12
    )


def test_fwht_is_the_hadamard_product() -> None:
    rng = np.random.default_rng(23)
    x = rng.normal(size=(3, 16))
    h = hadamard_entry(np.arange(16)[:, None], np.arange(16)[None, :]).astype(float)
    np.testing.assert_allclose(fwht(x), x @ h.T, atol=1e-12)
    with pytest.raises(ValueError, match="fwht needs a power-of-two length, got 6"):
        fwht(np.ones(6))


@pytest.mark.parametrize(("name", "estimator"), [("grr", "em"), ("grr", "normsub"), ("oue", "normsub")])
def test_projected_and_mle_frequencies_have_calibrated_error_bars(name: str, estimator: str) -> None:
    """Zipf items, n = 100,000, d = 50, eps = 0.5, R = 48: the point keeps the unbiased
    frequency's clipped interval, so coverage is within 4 sd of its binomial spread of 0.95;
    the standard error is the clipped interval's, within 2 sd of one key's ratio,
    1/sqrt(2R), of the point's RMSE (the raw standard error was 1.9 times it for GRR)."""
    repeats = 48
    users = generate("zipf", 100_000, 50, seed=0).users
    cal = calibrate(create(name, 50, 0.5), estimator, users, repeats, seed=5).frequency
    assert abs(cal.coverage - 0.95) <= 4 * math.sqrt(0.95 * 0.05 / cal.pairs), cal
    assert abs(cal.ratio - 1.0) <= 2 / math.sqrt(2 * repeats), cal


def test_unbiased_frequency_interval_is_clipped_with_the_analytic_stderr() -> None:
    users = generate("zipf", 2_000, 50, seed=0).users
    mech = create("grr", 50, 0.5)
    est = mech.estimate(mech.collect(users, np.random.default_rng(3)))
    low, high = est.frequency_interval
    assert np.any(est.frequency < 0) and np.all(low >= 0) and np.all(high <= 1)
    np.testing.assert_allclose(low, np.clip(est.frequency - Z95 * est.frequency_stderr, 0, 1))
    np.testing.assert_allclose(high, np.clip(est.frequency + Z95 * est.frequency_stderr, 0, 1))
