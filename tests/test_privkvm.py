"""PrivKVM (reconstructed; docs/mechanisms.md, *PrivKVM*): rounds, virtual iterations, estimators, privacy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.guarantees.privacy_audit import audit
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.common.mechanisms.privkvm_estimate import virtual_iterations
from kvldp.common.mechanisms.privkvm_rounds import means_digest
from kvldp.common.primitives import rr_keep


def population(n: int, rng: np.random.Generator) -> KVData:
    f = np.array([0.2, 0.5, 0.8])
    return KVData.from_dense(rng.random((n, 3)) < f, np.clip(rng.normal(0.5, 0.3, (n, 3)), -1, 1))


def test_virtual_iteration_worked_numbers() -> None:
    p1 = rr_keep(0.5)
    assert p1 == pytest.approx(0.6224593312, abs=1e-10)
    w = 0.3 * p1 / (0.3 * p1 + 0.7 * (1 - p1))
    assert w == pytest.approx(0.4140378359, abs=1e-10)
    assert 0.2 / w == pytest.approx(0.4830476412, abs=1e-10)
    got = virtual_iterations(np.array([0.3]), np.array([0.2]), p1, 5)
    assert got[0] == pytest.approx(0.4634949108, abs=1e-10)


def test_one_round_is_privkv_with_an_even_split() -> None:
    rng = np.random.default_rng(31)
    users = population(5000, rng)
    m1 = create("privkvm", 3, 1.4, rounds=1)
    m0 = create("privkv", 3, 1.4)
    stats = m1.collect(users, rng)
    as_privkv = m0.new_stats()
    as_privkv.arrays["counts"] += stats.arrays["counts"][0]
    as_privkv.arrays["n"] += stats.n_reports
    for est in ("unbiased", "paper", "em"):
        a, b = m1.estimate(stats, est), m0.estimate(as_privkv, est)
        np.testing.assert_allclose(a.frequency, b.frequency, atol=1e-9)
        np.testing.assert_allclose(a.mean, b.mean, atol=1e-6)
    assert audit(m1).max_log_ratio == pytest.approx(audit(m0).max_log_ratio, abs=1e-12)


@pytest.mark.parametrize("mode", ["default", "per_round_equal"])
@pytest.mark.parametrize("rounds", [1, 3, 10])
def test_audit_equals_the_composition_bound(mode: str, rounds: int) -> None:
    mech = create("privkvm", 5, 2.0, rounds=rounds, budget_mode=mode)
    result = audit(mech)
    assert result.ok
    assert result.max_log_ratio == pytest.approx(mech.claimed_epsilon(), abs=1e-9)
    if rounds <= 3:
        exhaustive = audit(create("privkvm", 2, 2.0, rounds=rounds, budget_mode=mode), exhaustive=True)
        assert exhaustive.max_log_ratio == pytest.approx(
            audit(create("privkvm", 2, 2.0, rounds=rounds, budget_mode=mode)).max_log_ratio, abs=1e-12
        )


def test_paper_mean_converges_geometrically_along_the_expected_trajectory() -> None:
    """On expected counts each calibration is exactly w m + (1 - w) m_published (docs/mechanisms.md, *PrivKVM budget and rounds*), and
    w = f in every round after the first (fair key coin), so bias_c = (1 - f)^(c-1) bias_1."""
    users = population(20_000, np.random.default_rng(32))
    true_f, true_m = users.truth()
    first = create("privkvm", 3, 2.0, rounds=1)
    bias1 = first.estimate(first.expected_stats(users), "paper").mean - true_m
    for rounds in (2, 4, 8):
        mech = create("privkvm", 3, 2.0, rounds=rounds)
        bias = mech.estimate(mech.expected_stats(users), "paper").mean - true_m
        np.testing.assert_allclose(bias, (1 - true_f) ** (rounds - 1) * bias1, rtol=1e-9, atol=1e-13)


def test_rounds_publish_means_that_non_holders_then_perturb() -> None:
    mech = create("privkvm", 3, 2.0, rounds=3)
    assert isinstance(mech, PrivKVM)
    rng = np.random.default_rng(33)
    batch = mech.perturb_many(population(3000, rng), rng)
    assert np.bincount(batch["r"]).tolist() == [3000, 3000, 3000]
    published = np.array([1.0, -1.0, 0.0])
    report = mech.perturb({0: 0.5}, rng, round_index=2, published=published)
    assert report["r"] == 2 and set(report) == {"r", "md", "j", "s"}
    assert report["md"] == means_digest(2, published) != means_digest(1, published)
    # a non-holder with published mean +1 reports value +1 whenever it reports the key at all
    non_holders = KVData.from_pairs(3, [{}] * 20_000)
    s = mech.perturb_round(non_holders, rng, 1, np.ones(3))["s"]
    up = np.mean(s[s != 1] == 2)
    p2 = mech.p2
    assert abs(up - p2) < 5 * math.sqrt(p2 * (1 - p2) / np.sum(s != 1))


def test_virtual_iterations_need_one_real_round() -> None:
    with pytest.raises(ValueError, match="one real round"):
        create("privkvm", 3, 1.0, rounds=2, virtual=5)


@pytest.mark.parametrize(
    ("params", "estimators"),
    [({"rounds": 3}, ("unbiased", "paper", "em")), ({"rounds": 1, "virtual": 5}, ("unbiased", "paper"))],
)
def test_mean_standard_errors_match_monte_carlo(params: dict[str, int], estimators: tuple[str, ...]) -> None:
    """R = 400 collections: the empirical variance of each mean within 4 sd of the sampling
    error of a variance ratio, sqrt(2/R), of the analytic (delta-method / Fisher) one."""
    rng = np.random.default_rng(34)
    users = population(20_000, rng)
    mech = create("privkvm", 3, 2.0, **params)
    repeats = 400
    draws: dict[str, list[np.ndarray]] = {e: [] for e in estimators}
    stderr: dict[str, list[np.ndarray]] = {e: [] for e in estimators}
    for _ in range(repeats):
        stats = mech.collect(users, rng)
        for e in estimators:
            est = mech.estimate(stats, e, tol=1e-6) if e == "em" else mech.estimate(stats, e)
            draws[e].append(est.mean)
            stderr[e].append(est.mean_stderr)
    for e in estimators:
        ratio = np.var(draws[e], axis=0, ddof=1)[1:] / np.mean(np.square(stderr[e]), axis=0)[1:]
        assert np.all(np.abs(ratio - 1) < 4 * math.sqrt(2 / repeats)), (e, ratio)
