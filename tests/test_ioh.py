"""IOH (docs/mechanisms.md, *IOH*): the mechanism that estimates the joint-state cell sums behind
conditional queries.

The worked example through IOH's noise (the printed counts and their arithmetic;
docs/mechanisms.md, *Conditional worked example*), the expected-count round trip and
the variance example of docs/mechanisms.md, *IOH*; estimators and their
undefined and clipped answers; configuration and wire format; the privacy audit.
Statistical tests compare the client against the exact model and the analytic variances
and standard errors against repeated collections of a correlated synthetic population.
The query machinery itself is tested in :mod:`tests.test_conditional`.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import InvalidReport
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.conditional import (
    Condition,
    ConditionalQuery,
    ProductSet,
    conditional_truth,
    parse_query,
)
from kvldp.common.guarantees.privacy_audit import audit, max_log_ratio
from kvldp.common.mechanisms.base import Mechanism, UnknownEstimator
from kvldp.common.mechanisms.ioh import IOH
from kvldp.common.mechanisms.registry import get
from kvldp.common.spec.params import InvalidParameter

from support.conditional import (
    NAMES,
    ONE_HOT_SUM,
    ROWS,
    TABLE_III,
    P,
    membership,
    population,
    table_users,
)


@pytest.fixture(autouse=True)
def _client_probabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    """These worked examples and folds check the client's p, q (a, b) exactly: the
    plausibility rule (docs/plausibility.md) refuses nothing here."""
    monkeypatch.setattr(Mechanism, "false_refusal_bound", 0.0)


def noisy_example() -> tuple[IOH, Stats]:
    """The worked example's arithmetic with noise: n = 3, per-bit budget ln 3 (p = 3/4), the printed counts."""
    mech = IOH(3, 2.0 * math.log(3.0))
    counts = np.ones(27, dtype=np.int64)
    counts[21], counts[8], counts[9], counts[0] = 3, 2, 2, 0
    return mech, Stats(mech, {"C": counts, "n": np.array([3])})


def every_query(d: int) -> list[ConditionalQuery]:
    """Every query over ``d`` keys: each target, conditioned on every subset of the
    other keys (up to d - 1 of them) held (1) or not held (0)."""
    return [
        ConditionalQuery.build(d, t, dict(zip(keys, bits, strict=True)))
        for t in range(d)
        for r in range(d)
        for keys in itertools.combinations([k for k in range(d) if k != t], r)
        for bits in itertools.product((0, 1), repeat=r)
    ]


def repeated_stats(
    mech: IOH, present: np.ndarray, values: np.ndarray, repeats: int, rng: np.random.Generator
) -> list[Stats]:
    """Independent collections of the same population, perturbed in blocks and folded one by one."""
    n = present.shape[0]
    block = max(1, 200_000 // n)
    out: list[Stats] = []
    for start in range(0, repeats, block):
        b = min(block, repeats - start)
        batch = mech.perturb_many(KVData.from_dense(np.tile(present, (b, 1)), np.tile(values, (b, 1))), rng)
        out.extend(mech.new_stats().fold({"a": batch["a"][r * n : (r + 1) * n]}) for r in range(b))
    return out


# --------------------------------------------------------------------------- worked examples
def test_arithmetic_with_noise() -> None:
    mech, stats = noisy_example()
    assert (mech.p, mech.q) == pytest.approx((0.75, 0.25), abs=1e-15)
    a_hat = np.full(27, 0.5)
    a_hat[21], a_hat[8], a_hat[9], a_hat[0] = 4.5, 2.5, 2.5, -1.5
    np.testing.assert_allclose(mech.calibrated(stats), a_hat, rtol=0, atol=1e-13)
    h_given_p = mech.conditional(stats, parse_query("hamburger | pepsi=1", NAMES))
    assert (h_given_p.numerator, h_given_p.denominator) == pytest.approx((10.0, 15.0), abs=1e-12)
    assert round(h_given_p.frequency, 7) == 0.6666667
    assert (h_given_p.positive, h_given_p.negative) == pytest.approx((7.0, 3.0), abs=1e-12)
    assert h_given_p.mean == pytest.approx(0.4, abs=1e-12)
    f_given_h = mech.conditional(stats, parse_query("fries | hamburger=1", NAMES))
    assert (f_given_h.numerator, f_given_h.denominator) == pytest.approx((6.0, 13.0), abs=1e-12)
    assert round(f_given_h.frequency, 7) == 0.4615385


def test_expected_count_round_trip() -> None:
    """eps = 2 (per-bit budget 1), n = 3: E C = 3q + (p-q)A and A_hat = A."""
    mech = IOH(3, 2.0)
    assert (mech.p, mech.q) == pytest.approx((0.7310585786, 0.2689414214), abs=1e-10)
    stats = mech.expected_stats(table_users())
    assert stats.arrays["C"][21] == pytest.approx(1.2689414213699952, rel=1e-15)
    assert stats.arrays["C"][0] == pytest.approx(0.8068242641099853, rel=1e-15)
    np.testing.assert_allclose(mech.calibrated(stats), ONE_HOT_SUM, rtol=0, atol=1e-12)
    est = mech.estimate(stats)
    np.testing.assert_allclose(est.frequency, [2 / 3, 2 / 3, 1.0], atol=1e-12)
    # three users: no key's holders are told from nobody at 95%, so no mean is estimable;
    # the holders' counts S+, S- are still exact
    assert np.all(np.isnan(est.mean)) and est.diagnostics["not_estimable_means"] == 3
    for text, *_, f_true, m_true in ROWS:
        ans = mech.conditional(stats, parse_query(text, NAMES))
        assert ans.frequency == pytest.approx(f_true, abs=1e-12)
        assert ans.positive - ans.negative == pytest.approx(m_true * (ans.positive + ans.negative), abs=1e-12)


def test_expected_round_trip_fractional_values() -> None:
    """The expected-count round trip with values strictly inside (-1, 1): Disc's expectation recovers every
    conditional frequency and mean of the population exactly (means where estimable)."""
    present, values = population(400, seed=3)
    users = KVData.from_dense(present, values)
    mech = IOH(3, 1.5)
    stats = mech.expected_stats(users)
    queries = every_query(3)
    for ans in mech.conditional_many(stats, queries):
        f_true, m_true = conditional_truth(users, ans.query)
        assert ans.frequency == pytest.approx(f_true, rel=1e-9)
        raw_mean = (ans.positive - ans.negative) / (ans.positive + ans.negative)
        assert raw_mean == pytest.approx(m_true, rel=1e-9, abs=1e-12)
        assert ans.mean == pytest.approx(
            m_true, rel=1e-9, abs=1e-12
        ) or "not estimable" in ans.diagnostics.get("mean_undefined", "")
    f_true, m_true = users.truth()
    est = mech.estimate(stats)
    np.testing.assert_allclose(est.frequency, f_true, rtol=1e-9)
    np.testing.assert_allclose(est.mean, m_true, rtol=1e-9)


def test_variance_example() -> None:
    """docs/mechanisms.md, *IOH*: d = 3, n = 1000, SUE at eps = 2: factor 0.9206735942, 12 cells, 11048.08."""
    mech = IOH(3, 2.0)
    assert mech.noise == pytest.approx(0.9206735942, abs=1e-10)
    assert mech.signal == 0.0
    cells = Condition.from_bits("101", "101").product_set()
    assert cells.size == 12
    assert mech.cell_set_variance(1000, cells.size, 0.0) == pytest.approx(11048.08, abs=0.005)
    stats = Stats(mech, {"C": np.full(27, 300, dtype=np.int64), "n": np.array([1000])})
    (sums,) = mech.cell_sums(stats, [[cells]], "unbiased")
    assert sums.covariance[0, 0] == pytest.approx(11048.08, abs=0.005)


# --------------------------------------------------------------------------- estimators
def test_undefined_and_clipped_answers() -> None:
    mech, _ = noisy_example()
    zeros = Stats(mech, {"C": np.zeros(27, dtype=np.int64), "n": np.array([3])})  # A_hat = -1.5 everywhere
    ans = mech.conditional(zeros, parse_query("hamburger | pepsi=1", NAMES))
    assert math.isnan(ans.frequency) and math.isnan(ans.frequency_stderr) and math.isnan(ans.mean)
    assert "frequency_undefined" in ans.diagnostics and "mean_undefined" in ans.diagnostics
    assert ans.to_dict(list(NAMES))["frequency"] is None
    est = mech.estimate(zeros)
    np.testing.assert_allclose(est.frequency, -9.0)  # raw: 18 cells x -1.5 / 3
    assert np.all(np.isnan(est.mean)) and est.diagnostics["undefined_means"] == 3
    assert np.all(np.isnan(mech.estimate(mech.new_stats()).frequency))  # no reports at all

    counts = np.full(27, 3, dtype=np.int64)  # A_hat = 4.5 everywhere
    counts[[9, 11, 12, 14, 15, 17]] = 0  # Pepsi without Hamburger: -1.5 each
    counts[[0, 2, 3, 5, 6, 8]] = 0  # Hamburger <1,-1> with Pepsi: -1.5 each
    stats = Stats(mech, {"C": counts, "n": np.array([3])})
    ans = mech.conditional(stats, parse_query("hamburger | pepsi=1", NAMES))
    assert (ans.numerator, ans.denominator) == pytest.approx((18.0, 9.0))
    assert ans.frequency == 1.0 and ans.diagnostics["frequency_clipped"]
    assert (ans.positive, ans.negative) == pytest.approx((27.0, -9.0))
    assert ans.mean == 1.0 and ans.diagnostics["mean_clipped"]
    # per-key frequencies stay raw (unbiased), conditional ones are clipped
    assert mech.estimate(stats).frequency[P] == pytest.approx(9.0 / 3.0)
    assert mech.conditional(stats, parse_query("pepsi", NAMES)).frequency == 1.0


def test_normsub_is_consistent() -> None:
    present, values = population(300, seed=6)
    mech = IOH(3, 0.5)
    stats = mech.collect(KVData.from_dense(present, values), np.random.default_rng(7))
    cells = mech.cell_vector(stats, "normsub")
    assert np.all(cells >= 0) and cells.sum() == pytest.approx(300.0)
    assert np.any(mech.calibrated(stats) < 0)  # the projection had work to do
    est = mech.estimate(stats, "normsub")
    assert np.all((est.frequency >= 0) & (est.frequency <= 1))
    ans = mech.conditional(stats, parse_query("fries | hamburger=0, pepsi=1", NAMES), "normsub")
    assert ans.estimator == "normsub" and 0 <= ans.frequency <= 1


def test_estimator_and_stats_checks() -> None:
    mech, stats = noisy_example()
    with pytest.raises(UnknownEstimator):
        mech.estimate(stats, "em")
    with pytest.raises(UnknownEstimator):
        mech.conditional(stats, parse_query("pepsi", NAMES), "em")
    with pytest.raises(TypeError, match=r"estimator unbiased takes no options, got \['tol'\]"):
        mech.estimate(stats, "unbiased", tol=1e-3)
    with pytest.raises(ValueError, match="cannot be estimated"):
        IOH(3, 1.0).conditional(stats, parse_query("pepsi", NAMES))
    with pytest.raises(ValueError, match="query over 2 keys"):
        mech.conditional(stats, parse_query("a", ["a", "b"]))


# --------------------------------------------------------------------------- configuration and wire format
def test_registration_and_limits() -> None:
    assert get("ioh") is IOH
    assert IOH(10, 1.0).fields()[0].nbytes == 7382 <= 64 * 1024
    with pytest.raises(InvalidParameter, match="at most 10 keys") as info:
        IOH(11, 1.0)
    assert "Hadamard" in str(info.value)
    assert IOH.max_keys == 10


def test_report_bits_are_lsb_first() -> None:
    """At a huge budget the report is the one-hot itself: index 21 is byte 2, bit 5."""
    mech = IOH(3, 80.0)
    report = mech.perturb(TABLE_III[0], np.random.default_rng(8))
    assert report["a"] == bytes([0, 0, 1 << 5, 0])
    batch = mech.perturb_many(table_users(), np.random.default_rng(9))
    assert batch["a"].shape == (3, 4) and batch["a"].dtype == np.uint8
    bits = np.unpackbits(batch["a"], axis=1, count=27, bitorder="little")
    assert [np.flatnonzero(b).tolist() for b in bits] == [[21], [8], [9]]


def test_invalid_reports_are_rejected() -> None:
    mech = IOH(2, 1.0)  # 9 bits in 2 bytes: 7 padding bits
    batch = mech.perturb_many(KVData.from_pairs(2, [{0: 0.5}, {}, {1: -0.2}]), np.random.default_rng(10))
    bad = {"a": batch["a"].copy()}
    bad["a"][1, 1] |= 0x80
    valid, reasons = mech.validate(bad)
    assert valid.tolist() == [True, False, True] and "padding" in reasons[1]
    stats = mech.new_stats()
    with pytest.raises(InvalidReport):
        stats.fold(bad)
    assert stats.n_reports == 0 and not stats.arrays["C"].any()
    with pytest.raises(InvalidReport):
        stats.fold({"a": np.zeros((2, 3), dtype=np.uint8)})


def test_fold_algebra_and_bytes() -> None:
    present, values = population(2_000, seed=11)
    mech = IOH(3, 1.0)
    batch = mech.perturb_many(KVData.from_dense(present, values), np.random.default_rng(12))
    whole = mech.new_stats().fold(batch)
    first = mech.new_stats().fold({"a": batch["a"][:700]})
    second = mech.new_stats().fold({"a": batch["a"][700:]})
    assert whole == first.merge(second) == second.merge(first)
    shuffled = mech.new_stats().fold({"a": batch["a"][np.random.default_rng(13).permutation(2_000)]})
    assert shuffled == whole
    bits = np.unpackbits(batch["a"], axis=1, count=27, bitorder="little")
    np.testing.assert_array_equal(whole.arrays["C"], bits.sum(axis=0))
    assert whole.n_reports == 2_000
    restored = mech.stats_from_bytes(whole.to_bytes())
    assert restored == whole
    assert mech.estimate(restored).frequency.tolist() == mech.estimate(whole).frequency.tolist()


# --------------------------------------------------------------------------- privacy
@pytest.mark.parametrize("d", [1, 2, 3])
def test_audit_reduced_equals_exhaustive(d: int) -> None:
    mech = IOH(d, 1.3)
    full, _ = max_log_ratio(mech.audit_model(exhaustive=True))
    reduced, _ = max_log_ratio(mech.audit_model(exhaustive=False))
    assert full == pytest.approx(reduced, abs=1e-12)
    result = audit(mech)
    assert result.exhaustive and result.ok and result.tight


def test_audit_reduced_at_d_4() -> None:
    result = audit(IOH(4, 0.7))
    assert not result.exhaustive and result.ok and result.tight and result.n_inputs == 2


# --------------------------------------------------------------------------- statistics of the client
def test_client_matches_exact_model() -> None:
    """Each C[i] is a sum of independent Bernoulli(q + (p-q) pi_u(i)): compare mean and spread."""
    present, values = population(20_000, seed=14)
    mech = IOH(3, 1.0)
    stats = mech.collect(KVData.from_dense(present, values), np.random.default_rng(15))
    cells = [ProductSet(tuple((int(s),) for s in digits)) for digits in itertools.product(range(3), repeat=3)]
    pi = mech.q + (mech.p - mech.q) * membership(present, values, cells)  # (users, 27)
    expected = mech.expected_stats(KVData.from_dense(present, values)).arrays["C"]
    np.testing.assert_allclose(expected, pi.sum(axis=0), rtol=1e-12)
    z = (stats.arrays["C"] - expected) / np.sqrt((pi * (1 - pi)).sum(axis=0))
    assert np.max(np.abs(z)) < 5
    assert 0.3 < np.mean(z**2) < 2.0  # chi-square(27) / 27: sd 0.27, bounds at P < 0.002


def test_cell_sums_unbiased_with_exact_covariance() -> None:
    """R = 2000 collections of n = 200 users, d = 3, eps = 2: every cell-set sum is unbiased
    and the empirical covariance matches the oracle's (plus Disc's, computed exactly)."""
    n, repeats = 200, 2_000
    present, values = population(n, seed=16)
    mech = IOH(3, 2.0)
    group = [
        Condition.from_bits("001", "001").product_set(),  # 18 cells
        Condition.from_bits("101", "101").product_set(),  # 12 cells, nested in the first
        Condition.from_bits("110", "100").product_set(),  # 6 cells
        *parse_query("hamburger | pepsi=1", NAMES).sets()[1:3],  # S+ and S-: Disc matters
    ]
    runs = repeated_stats(mech, present, values, repeats, np.random.default_rng(17))
    sums = np.array([mech.cell_sums(s, [group], "unbiased")[0].estimates for s in runs])
    oracle_cov = mech.cell_sums(runs[0], [group], "unbiased")[0].covariance
    member = membership(present, values, group)
    disc_cov = np.zeros(
        (len(group), len(group))
    )  # Disc: Cov(A(T_a), A(T_b)) = sum_u pi_u(a∩b) - pi_u(a) pi_u(b)
    for i, a in enumerate(group):
        for j, b in enumerate(group):
            common = a.intersection(b)
            both = membership(present, values, [common])[:, 0] if common is not None else 0.0
            disc_cov[i, j] = np.sum(both - member[:, i] * member[:, j])
    model_cov = oracle_cov + disc_cov
    truth = member.sum(axis=0)
    error = sums.mean(axis=0) - truth
    assert np.all(np.abs(error) < 4 * np.sqrt(np.diag(model_cov) / repeats)), error
    empirical = np.cov(sums, rowvar=False)
    ratio = np.diag(empirical) / np.diag(model_cov)
    assert np.all(np.abs(ratio - 1) < 0.15), ratio
    scale = np.sqrt(np.outer(np.diag(model_cov), np.diag(model_cov)))
    assert np.all(np.abs(empirical - model_cov) / scale < 0.1)
    assert oracle_cov[0, 1] == oracle_cov[1, 1] > 0 and oracle_cov[3, 4] == 0  # nested / disjoint


def test_conditional_standard_errors_are_calibrated() -> None:
    """R = 1000 collections of n = 4000 users at eps = 4: the spread of f_hat and m_hat matches
    the mean analytic variance within 15% (sd of a variance ratio at R = 1000: 4.5%)."""
    n, repeats = 4_000, 1_000
    present, values = population(n, seed=18)
    mech = IOH(3, 4.0)
    queries = [parse_query("hamburger | pepsi=1", NAMES), parse_query("pepsi | hamburger=1, fries=0", NAMES)]
    runs = repeated_stats(mech, present, values, repeats, np.random.default_rng(19))
    answers = [mech.conditional_many(s, queries) for s in runs]
    for j in range(len(queries)):
        f = np.array([a[j].frequency for a in answers])
        m = np.array([a[j].mean for a in answers])
        f_ratio = f.var(ddof=1) / np.mean([a[j].frequency_stderr ** 2 for a in answers])
        m_ratio = m.var(ddof=1) / np.mean([a[j].mean_stderr ** 2 for a in answers])
        assert abs(f_ratio - 1) < 0.15, (queries[j].format(NAMES), f_ratio)
        assert abs(m_ratio - 1) < 0.15, (queries[j].format(NAMES), m_ratio)


@pytest.mark.parametrize("estimator", ["unbiased", "normsub"])
def test_conditional_estimates_near_truth(estimator: str) -> None:
    """n = 300k, eps = 2: every 1-, 2- and 3-way query within 5 standard errors of the truth."""
    present, values = population(300_000, seed=20)
    users = KVData.from_dense(present, values)
    mech = IOH(3, 2.0)
    stats = mech.collect(users, np.random.default_rng(21))
    queries = every_query(3)
    for ans in mech.conditional_many(stats, queries, estimator):
        f_true, m_true = conditional_truth(users, ans.query)
        assert abs(ans.frequency - f_true) < 5 * ans.frequency_stderr, (ans.query.format(NAMES), ans)
        assert abs(ans.mean - m_true) < 5 * ans.mean_stderr, (ans.query.format(NAMES), ans)
