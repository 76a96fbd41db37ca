"""PCKV-UE and PCKV-GRR (docs/mechanisms.md, *PCKV*), the mechanisms themselves: registration and parameter
checks, the client (padding and sampling, perturbation against the exact model), the
statistics (fold algebra, serialisation, invalid reports) and the privacy audit.

The estimators are tested in :mod:`tests.test_pckv_estimate`, the budget allocation in
:mod:`tests.test_pckv_budget`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import kvldp.common.mechanisms.pckv as pckv
from kvldp.common import primitives
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import InvalidReport, from_rows, row
from kvldp.common.data.stats import Stats, StatsMismatch
from kvldp.common.guarantees.privacy_audit import audit
from kvldp.common.mechanisms import registry
from kvldp.common.mechanisms.padding import slot_weights
from kvldp.common.mechanisms.pckv import PCKV, PCKVGRR, PCKVUE, pad_and_sample
from kvldp.common.spec.params import InvalidParameter

from support.pckv import MECHS, population

ALLOCATIONS = ("optimized", "naive", "nonoptimized")


# ---------------------------------------------------------------------- registration and parameters
def test_registered_names() -> None:
    assert registry.get("pckv_ue") is PCKVUE
    assert registry.get("pckv_grr") is PCKVGRR


def test_parameter_validation() -> None:
    with pytest.raises(InvalidParameter, match="ell"):
        PCKVUE(5, 1.0, ell=0)
    with pytest.raises(InvalidParameter, match="count_floor"):
        PCKVGRR(5, 1.0, count_floor=2)
    with pytest.raises(InvalidParameter, match="allocation"):
        PCKVUE(5, 1.0, allocation="greedy")
    with pytest.raises(InvalidParameter, match="too large"):
        PCKVUE(5, 2000.0)
    with pytest.raises(InvalidParameter, match="degenerate"):
        PCKVGRR(5, 40.0)
    with pytest.raises(InvalidParameter, match="no parameter"):
        PCKVGRR(5, 1.0, key_fraction=0.5)


# ---------------------------------------------------------------------- client
def test_pad_and_sample_distribution() -> None:
    """Sampled pair and v* frequencies match the exact sampling weights (z < 5)."""
    ell, d, per = 2, 4, 40_000
    users = population(
        d, [(per, {}), (per, {1: 0.5}), (per, {0: -1.0, 2: 0.0}), (per, {0: 1.0, 1: 1.0, 3: 1.0})]
    )
    keys, vstar = pad_and_sample(users, ell, np.random.default_rng(41))
    w_pair, w_dummy = slot_weights(users, ell)
    np.testing.assert_allclose(np.unique(w_dummy), [0.0, 0.5, 1.0])
    group = np.repeat(np.arange(4), per)
    for g in range(4):
        sel = group == g
        first = int(np.flatnonzero(sel)[0])
        lo, hi = users.indptr[first], users.indptr[first + 1]
        probs = np.zeros(d + ell)
        probs[users.keys[lo:hi]] = w_pair[lo:hi]
        probs[d:] = w_dummy[first] / ell
        counts = np.bincount(keys[sel], minlength=d + ell)
        z = (counts - per * probs) / np.sqrt(per * probs * (1 - probs) + 1e-300)
        assert np.all(np.abs(z[probs > 0]) < 5) and np.all(counts[probs == 0] == 0), z
        # v* = Disc(v): key 1 in group 1 has v = 0.5 -> +1 w.p. 3/4; dummies are fair coins
        for key, p_up in ((1, 0.75 if g == 1 else 1.0), (d, 0.5)):
            hit = sel & (keys == key)
            if hit.sum() > 0 and probs[key] > 0:
                up = int(np.sum(vstar[hit] > 0))
                assert abs(up - hit.sum() * p_up) <= 5 * math.sqrt(hit.sum() * p_up * (1 - p_up)) + 1e-9


@pytest.mark.parametrize("cls", MECHS)
def test_client_matches_model(cls: type[PCKV], monkeypatch: pytest.MonkeyPatch) -> None:
    """Observed n1, n2 against expected_stats (a sum of independent Bernoullis, so
    Var <= E gives the tolerance), with users above, at and below ell = 2 keys."""
    monkeypatch.setattr(pckv, "UE_BLOCK_CELLS", 4096)  # exercise the block loop of the UE client
    d, ell = 12, 2
    rng = np.random.default_rng(51)
    present = rng.random((60_000, d)) < 0.12
    users = KVData.from_dense(present, rng.uniform(-1, 1, size=(60_000, d)))
    assert users.sizes.max() > ell and users.sizes.min() == 0
    mech = cls(d, 2.0, ell=ell)
    batch = mech.perturb_many(users, rng)
    valid, _ = mech.validate(batch)
    assert valid.all()
    observed = mech.new_stats().fold(batch)
    expected = mech.expected_stats(users)
    for name in ("n1", "n2"):
        exp = expected.arrays[name]
        assert np.all(np.abs(observed.arrays[name] - exp) < 5 * np.sqrt(exp)), name
    if cls is PCKVGRR:
        # dummy outputs: a + (ell-1) b after a sampled dummy, ell b otherwise
        _, w_dummy = slot_weights(users, ell)
        exp_dummy = float(np.sum(w_dummy * (mech.a + (ell - 1) * mech.b) + (1 - w_dummy) * ell * mech.b))
        dummies = int(np.sum(batch["k"] == d))
        assert abs(dummies - exp_dummy) < 5 * math.sqrt(exp_dummy)
        assert np.all(batch["v"][batch["k"] == d] == 0)


@pytest.mark.parametrize("cls", MECHS)
def test_single_device_perturb(cls: type[PCKV]) -> None:
    mech = cls(11, 1.0, ell=2)
    report = mech.perturb({0: 0.3, 7: -1.0}, np.random.default_rng(61))
    assert set(report) == {f.name for f in mech.fields()}
    batch = from_rows([report], mech.fields())
    assert mech.validate(batch)[0].all()
    if cls is PCKVUE:
        for name in ("pos", "neg"):
            bits = report[name]
            assert isinstance(bits, bytes) and len(bits) == 2


# ---------------------------------------------------------------------- statistics
@pytest.mark.parametrize("cls", MECHS)
def test_fold_algebra_and_serialisation(cls: type[PCKV], monkeypatch: pytest.MonkeyPatch) -> None:
    d = 11  # not a multiple of 8: padding bits exist
    mech = cls(d, 1.0, ell=2)
    rng = np.random.default_rng(71)
    users = KVData.from_dense(rng.random((3000, d)) < 0.2, rng.uniform(-1, 1, size=(3000, d)))
    b1 = mech.perturb_many(users.rows(0, 1700), rng)
    b2 = mech.perturb_many(users.rows(1700, 3000), rng)
    both = {k: np.concatenate([b1[k], b2[k]]) for k in b1}
    whole = mech.new_stats().fold(both)
    assert whole == mech.new_stats().fold(b1).merge(mech.new_stats().fold(b2))
    perm = rng.permutation(3000)
    assert whole == mech.new_stats().fold({k: v[perm] for k, v in both.items()})
    assert whole.n_reports == 3000
    assert Stats.from_bytes(mech, whole.to_bytes()) == whole
    with pytest.raises(StatsMismatch):
        Stats.from_bytes(cls(d, 2.0, ell=2), whole.to_bytes())
    # single reports through the wire form fold to the same statistics
    rows = [row(both, mech.fields(), i) for i in range(200)]
    assert mech.new_stats().fold(from_rows(rows, mech.fields())) == mech.new_stats().fold(
        {k: v[:200] for k, v in both.items()}
    )
    # independent count of the first 50 reports, bit i = byte i>>3, position i&7
    n1 = np.zeros(d, dtype=np.int64)
    n2 = np.zeros(d, dtype=np.int64)
    for rep in rows[:50]:
        if cls is PCKVUE:
            pos_bytes, neg_bytes = rep["pos"], rep["neg"]
            assert isinstance(pos_bytes, bytes) and isinstance(neg_bytes, bytes)
            pos, neg = int.from_bytes(pos_bytes, "little"), int.from_bytes(neg_bytes, "little")
            n1 += [(pos >> j) & 1 for j in range(d)]
            n2 += [(neg >> j) & 1 for j in range(d)]
        elif rep["k"] != d:
            (n1 if rep["v"] == 1 else n2)[int(rep["k"])] += 1
    head = mech.new_stats().fold({k: v[:50] for k, v in both.items()})
    np.testing.assert_array_equal(head.arrays["n1"], n1)
    np.testing.assert_array_equal(head.arrays["n2"], n2)
    # folding in several blocks gives the same counts
    monkeypatch.setattr(primitives, "_BIT_BLOCK", 64)
    assert mech.new_stats().fold(both) == whole


def test_ue_invalid_reports() -> None:
    mech = PCKVUE(11, 1.0)
    good = mech.perturb_many(KVData.from_pairs(11, [{0: 1.0}] * 4), np.random.default_rng(81))
    pos, neg = good["pos"].copy(), good["neg"].copy()
    pos[1], neg[1] = [0b100, 0], [0b100, 0]  # key 2 both +1 and -1
    pos[2], neg[2] = [0, 0b1000], [0, 0]  # bit 11 is padding (d = 11)
    neg[3] = [0, 0b10000000]
    pos[3] = [0, 0]
    batch = {"pos": pos, "neg": neg}
    valid, reasons = mech.validate(batch)
    assert list(valid) == [True, False, False, False]
    assert "share a bit" in reasons[1]
    assert "padding" in reasons[2] and "pos" in reasons[2]
    assert "padding" in reasons[3] and "neg" in reasons[3]
    stats = mech.new_stats()
    with pytest.raises(InvalidReport, match="report 1"):
        stats.fold(batch)
    assert stats == mech.new_stats()  # a bad batch changes nothing


def test_grr_invalid_reports() -> None:
    mech = PCKVGRR(5, 1.0)
    batch = {
        "k": np.array([0, 5, 6, 5, 2, 1, 3], dtype=np.int64),
        "v": np.array([1, 0, 1, 1, 0, 2, -2], dtype=np.int64),
    }
    valid, reasons = mech.validate(batch)
    assert list(valid) == [True, True, False, False, False, False, False]
    assert "not below 6" in reasons[2]
    assert "dummy" in reasons[3] and "v = 0" in reasons[3]
    assert "reserved" in reasons[4]
    assert "not below 2" in reasons[5]
    assert "below -1" in reasons[6]


# ---------------------------------------------------------------------- privacy
@pytest.mark.parametrize("cls", MECHS)
@pytest.mark.parametrize("allocation", ALLOCATIONS)
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize(("d", "ell"), [(2, 1), (5, 2)])
def test_audit_matches_claim(cls: type[PCKV], allocation: str, eps: float, d: int, ell: int) -> None:
    """Exact audit = Theorem 2/3 (d >= 2 ell), never above eps; tight when optimized."""
    mech = cls(d, eps, ell=ell, allocation=allocation)
    result = audit(mech, exhaustive=False)
    assert result.max_log_ratio == pytest.approx(mech.claimed_epsilon(), abs=1e-9)
    assert result.ok and result.max_log_ratio <= eps + 1e-9
    if allocation == "optimized":
        assert result.tight
    elif allocation == "naive":
        assert result.max_log_ratio < eps - 1e-3


@pytest.mark.parametrize("cls", MECHS)
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("ell", [1, 2])
@pytest.mark.parametrize(("eps", "allocation"), [(1.0, "optimized"), (2.0, "naive")])
def test_reduced_audit_equals_exhaustive(
    cls: type[PCKV], d: int, ell: int, eps: float, allocation: str
) -> None:
    mech = cls(d, eps, ell=ell, allocation=allocation)
    assert mech.exhaustive_feasible()
    full = audit(mech, exhaustive=True)
    reduced = audit(mech, exhaustive=False)
    assert full.n_inputs == 3**d
    assert reduced.max_log_ratio == pytest.approx(full.max_log_ratio, abs=1e-12)
    assert full.max_log_ratio <= mech.claimed_epsilon() + 1e-9


def test_ue_not_tight_when_fewer_keys_than_ell() -> None:
    """With d < ell every user samples a dummy with positive probability: Theorem 2 (which
    ignores ell) is then an upper bound, not the exact level."""
    mech = PCKVUE(1, 1.0, ell=2)
    assert audit(mech, exhaustive=True).max_log_ratio < mech.claimed_epsilon() - 0.1


def test_audit_size_limits() -> None:
    assert PCKVUE(5, 1.0).exhaustive_feasible() and not PCKVUE(6, 1.0).exhaustive_feasible()
    assert PCKVGRR(7, 1.0).exhaustive_feasible() and not PCKVGRR(8, 1.0).exhaustive_feasible()
    with pytest.raises(ValueError, match="too large"):
        PCKVGRR(500, 1.0, ell=100).audit_model(exhaustive=False)
    with pytest.raises(ValueError, match="too large"):
        PCKVUE(12, 1.0, ell=4).audit_model(exhaustive=False)
    with pytest.raises(ValueError, match="too large"):
        PCKVGRR(30, 1.0).audit_model(exhaustive=True)
