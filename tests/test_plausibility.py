"""The exact one-report plausibility rule (docs/plausibility.md): its threshold is the
largest whose false refusal rate is <= the bound, it agrees with brute-force enumeration
of every output for tiny domains, genuine reports pass and forged ones do not."""

from __future__ import annotations

import itertools
import math
from typing import Any, ClassVar

import numpy as np
import pytest
from numpy.typing import NDArray

from kvldp.common.channel.output_model import DenseModel
from kvldp.common.channel.plausibility import FALSE_REFUSAL_BOUND, RefusalRule, next_refusal_mass, set_bits
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import ReportBatch
from kvldp.common.mechanisms import registry
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.ioh import IOH
from kvldp.common.mechanisms.ioh_hrr import IOHOUE
from kvldp.common.mechanisms.pckv import PCKVUE
from kvldp.common.mechanisms.ue import OUE, SUE
from kvldp.common.primitives import pack_bits

#: (mechanism, d, epsilon, params): typical settings, where the rule refuses something
TYPICAL = [
    ("pckv_ue", 50, 1.0, {"ell": 1}),
    ("pckv_ue", 100, 0.5, {"ell": 3}),
    ("pckv_ue", 20, 4.0, {"ell": 2}),
    ("oue", 50, 1.0, {"ell": 1}),
    ("oue", 30, 2.0, {"ell": 0}),
    ("sue", 40, 1.0, {"ell": 2}),
    ("ioh", 3, 1.0, {}),
    ("ioh_oue", 4, 2.0, {}),
]
UNARY = ("pckv_ue", "oue", "sue", "ioh", "ioh_oue")


@pytest.mark.parametrize(("rows", "nbytes"), [(0, 3), (4, 0), (5, 1), (7, 8), (300, 9), (2000, 821)])
def test_set_bits_counts_every_set_bit_of_every_row(rows: int, nbytes: int) -> None:
    """Widths that are and are not whole 64-bit words, several blocks of rows, and a
    non-contiguous view."""
    packed = np.random.default_rng(rows + nbytes).integers(0, 256, (rows, nbytes), dtype=np.uint8)
    expected = np.unpackbits(packed, axis=1).sum(axis=1)
    assert set_bits(packed).tolist() == expected.tolist()
    assert (
        set_bits(packed[::2, : nbytes // 2]).tolist()
        == np.unpackbits(packed[::2, : nbytes // 2], axis=1).sum(axis=1).tolist()
    )


def _rule(mech: Mechanism) -> RefusalRule:
    rule = mech.plausibility_rule()
    assert rule is not None
    return rule


def _class_pmf(mech: Mechanism) -> NDArray[np.float64]:
    """The per-class pmf the rule was built from, recomputed independently of it."""
    from kvldp.common.channel.plausibility import binomial_pmf, plus_bernoulli

    if isinstance(mech, PCKVUE):
        real = plus_bernoulli(binomial_pmf(mech.d - 1, mech.client_b), mech.client_a)
        return np.stack([real, binomial_pmf(mech.d, mech.client_b)])
    if isinstance(mech, IOH):
        return plus_bernoulli(binomial_pmf(mech.n_cells - 1, mech.q), mech.p)[None, :]
    assert isinstance(mech, (OUE, SUE))
    key = plus_bernoulli(binomial_pmf(mech.d - 1, mech.q), mech.p)
    if mech.ell == 0:
        return key[None, :]
    none = binomial_pmf(mech.d, mech.q)
    return np.stack(
        [np.outer(key, [1 - mech.q, mech.q]).reshape(-1), np.outer(none, [1 - mech.p, mech.p]).reshape(-1)]
    )


@pytest.mark.parametrize(("name", "d", "eps", "params"), TYPICAL)
def test_threshold_is_the_largest_within_the_bound(
    name: str, d: int, eps: float, params: dict[str, Any]
) -> None:
    mech = registry.create(name, d, eps, **params)
    rule = _rule(mech)
    pmf = _class_pmf(mech)
    assert rule.active
    refused_mass = pmf[:, rule.refused].sum(axis=1)
    np.testing.assert_allclose(rule.false_refusal, refused_mass, rtol=1e-12, atol=1e-300)
    assert refused_mass.max() <= FALSE_REFUSAL_BOUND
    # one more value of the statistic (the next likeliest) would refuse too many genuine reports
    assert next_refusal_mass(rule, pmf) > FALSE_REFUSAL_BOUND
    # every refused value is less likely than every accepted one
    assert rule.log_max_likelihood[rule.refused].max() < rule.log_max_likelihood[~rule.refused].min()


def _outputs(mech: Mechanism) -> tuple[ReportBatch, NDArray[np.float64]]:
    """Every output of a tiny configuration as a report batch, with Pr[output | input]
    for every discrete input (inputs, outputs) from the exhaustive audit model."""
    if isinstance(mech, PCKVUE):
        y = np.array(list(itertools.product((1, -1, 0), repeat=mech.d)), dtype=np.int64)
        model = mech.audit_model(exhaustive=True)
        assert isinstance(model, DenseModel)
        return {"pos": pack_bits(y == 1), "neg": pack_bits(y == -1)}, model.probs
    if isinstance(mech, IOH):
        bits = np.array(list(itertools.product((0, 1), repeat=mech.n_cells)), dtype=bool)
        one = np.where(np.eye(mech.n_cells, dtype=bool), mech.p, mech.q)  # (state, bit)
        probs = np.prod(np.where(bits[None, :, :], one[:, None, :], 1 - one[:, None, :]), axis=2)
        return {"a": pack_bits(bits)}, probs
    bits = np.array(list(itertools.product((0, 1), repeat=mech.domain)), dtype=bool)
    model = mech.audit_model(exhaustive=True)
    assert isinstance(model, DenseModel)
    return {"bits": pack_bits(bits)}, model.probs


def _brute_force_refused(
    probs: NDArray[np.float64], bound: float
) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """The definition, over every output: refuse {y : max_x P(y|x) < tau} for the largest tau
    whose refused mass is <= bound under every input."""
    best = probs.max(axis=0)
    levels = np.unique(np.round(np.log(best), 9))
    refused = np.zeros(best.shape[0], dtype=bool)
    for tau in levels:  # ascending: refuse everything strictly below the level
        candidate = np.round(np.log(best), 9) < tau
        if probs[:, candidate].sum(axis=1).max() > bound:
            break
        refused = candidate
    else:
        if probs.sum(axis=1).max() <= bound:
            refused[:] = True
    return refused, best


class _LooseOUE(OUE):
    false_refusal_bound: ClassVar[float] = 0.02


class _LooseSUE(SUE):
    false_refusal_bound: ClassVar[float] = 0.05


class _LoosePCKVUE(PCKVUE):
    false_refusal_bound: ClassVar[float] = 0.02


class _LooseIOH(IOH):
    false_refusal_bound: ClassVar[float] = 0.02


class _LooseIOHOUE(IOHOUE):
    false_refusal_bound: ClassVar[float] = 0.01


TINY = [
    (_LooseOUE, 3, 2.0, {"ell": 0}),
    (_LooseOUE, 3, 2.0, {"ell": 1}),
    (_LooseOUE, 3, 3.0, {"ell": 2}),
    (_LooseSUE, 4, 2.0, {"ell": 1}),
    (_LoosePCKVUE, 3, 2.0, {"ell": 1}),
    (_LoosePCKVUE, 4, 3.0, {"ell": 2}),
    (_LooseIOH, 1, 4.0, {}),
    (_LooseIOHOUE, 1, 3.0, {}),
]


@pytest.mark.parametrize(("cls", "d", "eps", "params"), TINY)
def test_rule_matches_brute_force_enumeration(
    cls: type[Mechanism], d: int, eps: float, params: dict[str, Any]
) -> None:
    """A loose bound makes the rule bite at tiny d; the rule must then be exactly the
    definition applied to every output and every discrete input."""
    mech = cls(d, eps, **params)
    rule = _rule(mech)
    batch, probs = _outputs(mech)
    values = mech.report_statistic(batch)
    refused, best = _brute_force_refused(probs, mech.false_refusal_bound)
    assert refused.any() and not refused.all()
    np.testing.assert_array_equal(rule.refuses(values), refused)
    np.testing.assert_allclose(np.exp(rule.log_max_likelihood[values]), best, rtol=1e-9)
    # the worst input's refused mass is the worst class's
    assert probs[:, refused].sum(axis=1).max() == pytest.approx(rule.false_refusal.max(), rel=1e-9)
    np.testing.assert_array_equal(mech.implausible_rows(batch), refused)
    np.testing.assert_array_equal(mech.valid_rows(batch), ~refused)


@pytest.mark.parametrize(("cls", "d", "eps", "params"), [t for t in TINY if t[0] is not _LoosePCKVUE])
def test_one_hot_accepted_probabilities_match_enumeration(
    cls: type[Mechanism], d: int, eps: float, params: dict[str, Any]
) -> None:
    """alpha, p' and q' against enumeration, and the unbiased estimator exact on the
    expected statistics of the accepted reports."""
    mech = cls(d, eps, **params)
    acc = mech.accepted  # type: ignore[attr-defined]
    batch, _ = _outputs(mech)
    column = next(iter(batch.values()))
    nbits = mech.n_cells if isinstance(mech, IOH) else mech.domain  # type: ignore[attr-defined]
    bits = np.unpackbits(column, axis=1, count=nbits, bitorder="little").astype(bool)
    keep = ~_rule(mech).refuses(mech.report_statistic(batch))
    p, q = mech.p, mech.q  # type: ignore[attr-defined]
    # item 0's report law, bit by bit
    one = np.full(nbits, q)
    one[0] = p
    law = np.prod(np.where(bits, one, 1 - one), axis=1)
    alpha = law[keep].sum()
    assert acc.alpha == pytest.approx(alpha, rel=1e-12)
    assert acc.p == pytest.approx(law[keep & bits[:, 0]].sum() / alpha, rel=1e-12)
    assert acc.q == pytest.approx(law[keep & bits[:, 1]].sum() / alpha, rel=1e-12)
    if not isinstance(mech, IOH):
        users = KVData.from_pairs(d, [{0: 1.0}] * 3 + [{1: 1.0}] + [{}] * (1 if mech.ell else 0))  # type: ignore[attr-defined]
        truth, _ = users.truth()
        est = mech.estimate(mech.expected_stats(users), "unbiased")
        np.testing.assert_allclose(est.frequency, truth, rtol=1e-9, atol=1e-12)


def test_pckv_ue_accepted_law_matches_enumeration_and_bounds_the_bias() -> None:
    mech = _LoosePCKVUE(3, 3.0, ell=2)
    rule, acc = _rule(mech), mech.accepted
    assert rule.active
    y = np.array(list(itertools.product((1, -1, 0), repeat=3)), dtype=np.int64)
    keep = ~rule.refuses(mech.report_statistic({"pos": pack_bits(y == 1), "neg": pack_bits(y == -1)}))
    a, b, p = mech.client_a, mech.client_b, mech.p
    # a device that sampled key 0 with v* = +1, and one that sampled a dummy
    first = np.select([y[:, 0] == 1, y[:, 0] == -1], [a * p, a * (1 - p)], 1 - a)
    rest = np.prod(np.where(y[:, 1:] == 0, 1 - b, b / 2), axis=1)
    real, dummy = first * rest, np.prod(np.where(y == 0, 1 - b, b / 2), axis=1)
    assert acc.alpha == pytest.approx(real[keep].sum(), rel=1e-12)
    assert acc.a == pytest.approx(real[keep & (y[:, 0] != 0)].sum() / acc.alpha, rel=1e-12)
    assert acc.b == pytest.approx(real[keep & (y[:, 1] != 0)].sum() / acc.alpha, rel=1e-12)
    assert acc.dummy_alpha == pytest.approx(dummy[keep].sum(), rel=1e-12)
    assert acc.dummy_b == pytest.approx(dummy[keep & (y[:, 0] != 0)].sum() / acc.dummy_alpha, rel=1e-12)
    # expected statistics of the accepted reports, by enumeration over a small population
    users = KVData.from_pairs(3, [{0: 1.0, 1: -1.0}, {0: 1.0}, {}, {2: -1.0}, {0: -1.0, 2: 1.0}])
    model = mech.audit_model(exhaustive=True)
    assert isinstance(model, DenseModel)
    inputs = {label: i for i, label in enumerate(model.inputs)}
    labels = ["{0:+1, 1:-1}", "{0:+1}", "{}", "{2:-1}", "{0:-1, 2:+1}"]
    rows = model.probs[[inputs[label] for label in labels]] * keep[None, :]
    expected = mech.expected_stats(users).arrays
    np.testing.assert_allclose(expected["n"][0], rows.sum(), rtol=1e-12)
    np.testing.assert_allclose(expected["n1"], rows.sum(axis=0) @ (y == 1), rtol=1e-12)
    np.testing.assert_allclose(expected["n2"], rows.sum(axis=0) @ (y == -1), rtol=1e-12)
    # the unbiased frequency on them is within the documented residual bias
    truth, _ = users.truth()
    est = mech.estimate(mech.expected_stats(users), "unbiased")
    relative, additive = mech.plausibility_bias_bound()
    assert np.all(np.abs(est.frequency - truth) <= truth * relative + additive + 1e-12)
    assert relative > 0 and additive > 0


@pytest.mark.parametrize(("name", "d", "eps", "params"), TYPICAL)
def test_genuine_reports_pass_and_forged_ones_do_not(
    name: str, d: int, eps: float, params: dict[str, Any]
) -> None:
    mech = registry.create(name, d, eps, **params)
    rng = np.random.default_rng(27)
    n = 100_000
    users = KVData.from_pairs(d, [{int(k): 1.0} for k in rng.integers(0, d, size=n)])
    batch = mech.perturb_many(users, rng)
    assert not mech.implausible_rows(batch).any()
    assert mech.valid_rows(batch).all()
    forged = {name_: np.full_like(column[:2], 0xFF) for name_, column in batch.items()}
    for field in mech.fields():  # every bit set, padding bits clear
        spare = field.nbytes * 8 - field.high
        if spare:
            forged[field.name][:, -1] = 0xFF >> spare
    if name == "pckv_ue":
        forged["neg"][:] = 0  # every key +1: no overlap, so only the rule can refuse it
    valid, codes, details = mech.validate_coded(forged)
    assert not valid.any()
    assert set(codes) == {"implausible_report"}
    assert "false refusal <= 1e-06" in details[0] and "at most" in details[0]


def test_detail_names_the_statistic_and_threshold() -> None:
    mech = registry.create("oue", 50, 1.0, ell=0)
    forged = {"bits": pack_bits(np.arange(50)[None, :] < 41)}
    _, codes, details = mech.validate_coded(forged)
    assert codes[0] == "implausible_report"
    assert details[0].startswith("41 of 50 bits set; a genuine report sets at most 30 bits")


def test_a_constraint_violation_is_reported_before_plausibility() -> None:
    mech = registry.create("pckv_ue", 50, 1.0)
    full = np.full((1, 7), 0xFF, dtype=np.uint8)
    full[:, -1] = 0x03
    _, codes, _ = mech.validate_coded({"pos": full, "neg": full.copy()})
    assert codes[0] == "invalid_report"


@pytest.mark.parametrize("name", ["pckv_ue", "oue", "ioh"])
def test_tiny_domains_refuse_nothing(name: str) -> None:
    """At d = 1 (and PCKV-UE at d = 2) every count of set bits is too common to refuse."""
    mech = registry.create(name, 1 if name != "pckv_ue" else 2, 1.0)
    rule = _rule(mech)
    assert not rule.active and rule.log_threshold == -math.inf
    assert np.all(rule.false_refusal == 0)
    batch, _ = _outputs(mech)
    assert not mech.implausible_rows(batch).any()


@pytest.mark.parametrize("name", sorted(set(registry.names()) - set(UNARY)))
def test_single_symbol_mechanisms_have_no_rule(name: str) -> None:
    mech = registry.create(name, 4, 1.0)
    assert mech.plausibility_rule() is None
    batch = mech.perturb_many(KVData.from_pairs(4, [{0: 1.0}] * 5), np.random.default_rng(0))
    assert not mech.implausible_rows(batch).any()


def test_huge_domain_is_exact_and_quick() -> None:
    mech = registry.create("pckv_ue", 200_000, 1.0, ell=4)
    rule = _rule(mech)
    assert 0 < rule.false_refusal.max() <= FALSE_REFUSAL_BOUND
    assert next_refusal_mass(rule, _class_pmf(mech)) > FALSE_REFUSAL_BOUND


@pytest.mark.parametrize("cls", [_LooseOUE, _LooseSUE])
def test_one_hot_estimator_stays_unbiased_where_the_rule_bites(cls: type[Mechanism]) -> None:
    """A loose bound refuses a visible share of genuine reports at d = 3; the unbiased
    frequencies on the accepted reports stay within 4 standard errors of the truth."""
    mech = cls(3, 1.0, ell=1)
    rng = np.random.default_rng(11)
    n = 200_000
    keys = rng.choice(4, size=n, p=[0.5, 0.3, 0.1, 0.1])
    users = KVData.from_pairs(3, [{int(k): 1.0} if k < 3 else {} for k in keys])
    truth, _ = users.truth()
    batch = mech.perturb_many(users, rng)
    keep = mech.valid_rows(batch)
    assert 0.005 < 1 - keep.mean() < 0.05  # the rule bites visibly
    stats = mech.new_stats()
    stats.fold({k: v[keep] for k, v in batch.items()})
    est = mech.estimate(stats, "unbiased")
    assert np.all(np.abs(est.frequency - truth) < 4 * est.frequency_stderr), (est.frequency, truth)


@pytest.mark.parametrize("name", sorted(set(registry.names()) - set(UNARY)))
def test_every_single_symbol_report_is_plausible(name: str) -> None:
    """docs/plausibility.md: an eps-LDP single-symbol mechanism emits every output under every
    input (exhaustive audit at d = 2). FHR is only FLDP: its zero-probability outputs are
    exactly x = y (refused as invalid_report), and its least likely valid outputs carry
    genuine mass far above the bound, so no threshold could refuse them."""
    mech = registry.create(name, 2, 1.0)
    model = mech.audit_model(exhaustive=True)
    probs = model.probs if isinstance(model, DenseModel) else model.factors
    if name != "fhr":
        assert probs.min() > 0
        return
    length = mech.length  # type: ignore[attr-defined]
    never = np.flatnonzero((probs == 0).all(axis=0))
    assert sorted(never.tolist()) == [x * length + x for x in range(length)]
    wide = registry.create("fhr", 100, 1.0)
    wide_model = wide.audit_model(exhaustive=True)
    assert isinstance(wide_model, DenseModel)
    best = wide_model.probs.max(axis=0)
    valid = best > 0
    low = valid & (best < best[valid].max() * (1 - 1e-12))
    assert wide_model.probs[:, low].sum(axis=1).max() > 1e3 * FALSE_REFUSAL_BOUND
