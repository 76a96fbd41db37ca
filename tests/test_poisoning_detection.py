"""Detection of fake devices by the poisoning score, in-process, with the fakes of
:mod:`kvldp.attacks.fakes` (maximal gain, adaptive, input poisoning).

Two situations. *Steady*: the fakes have reported all along, at the same rate as the
genuine devices, and only one snapshot's consistency tests can see them. *Onset*: the
attack starts inside the newest window (the shortest finite one), so the jump test
compares that window with the rest of the longest one. The fast tests run 20,000
genuine devices; the ``full`` test measures the table of docs/detection.md (100,000
genuine devices of ``gaussian_pckv``, d = 50).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvldp.attacks.fakes import fake_reports
from kvldp.attacks.target import Target
from kvldp.common.data.kvdata import KVData
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.untrusted.poisoning import ALERT_SCORE, PoisoningReport, poisoning_reports
from kvldp.sim.datasets import generate

#: share of the genuine devices that report inside the newest window
NEWEST = 0.1


def attacked(
    mech: Mechanism,
    users: KVData,
    targets: np.ndarray,
    beta: float,
    onset: bool,
    seed: int,
    kind: str = "m2ga",
) -> PoisoningReport:
    """A two-window refit (newest, all) with M2GA fakes (``beta`` of all devices): with
    ``onset`` they all report in the newest window and this is its report (the jump
    test's); otherwise they report all along and this is the ``all`` window's."""
    rng = np.random.default_rng([seed, 23])
    cut = int((1 - NEWEST) * users.n_users)
    old = mech.collect(users.rows(0, cut), rng)
    recent = mech.collect(users.rows(cut, users.n_users), rng)
    fakes = round(beta / (1.0 - beta) * users.n_users)  # beta of all devices
    target = Target(np.asarray(targets, dtype=np.int64))
    if onset:
        recent.fold(fake_reports(mech, kind, fakes, target, rng))
    else:
        late = round(fakes * NEWEST)
        old.fold(fake_reports(mech, kind, fakes - late, target, rng))
        recent.fold(fake_reports(mech, kind, late, target, rng))
    reports = poisoning_reports(mech, {"recent": recent, "all": old.merge(recent)}, "recent", "all")
    return reports["recent" if onset else "all"]


def rarest(users: KVData, r: int) -> np.ndarray:
    return np.argsort(np.bincount(users.keys, minlength=users.d), kind="stable")[:r]


@pytest.fixture(scope="module")
def population() -> KVData:
    return generate("gaussian_pckv", 20_000, 20, seed=5).users


@pytest.mark.parametrize("name", ["privkv", "kvue", "f2m", "kvoh", "kvue_multi"])
def test_key_sampled_fakes_are_flagged_in_one_snapshot(population: KVData, name: str) -> None:
    """Maximal-gain fakes pile reports on t (an excess no key sampling produces) and drive
    its estimated count of -1 holders below 0: flagged even when they have reported all
    along."""
    targets = rarest(population, 1)
    mech = create(name, population.d, 1.0)
    report = attacked(mech, population, targets, 0.05, onset=False, seed=1)
    assert report.key_score[targets[0]] >= ALERT_SCORE
    assert report.key_test[targets[0]] in ("reports", "state_neg")


@pytest.mark.parametrize("name", ["privkv", "kvue", "kvoh"])
def test_adaptive_key_sampled_fakes_are_flagged_by_their_report_count(population: KVData, name: str) -> None:
    """Adaptive fakes send the genuine client's symbol for <t, +1> at their target: every
    state count stays possible, but key sampling gives t too many reports."""
    targets = rarest(population, 3)
    report = attacked(create(name, population.d, 1.0), population, targets, 0.05, False, 5, "adaptive")
    assert np.all(report.key_score[targets] >= ALERT_SCORE)
    assert all(report.key_test[t] == "reports" for t in targets)


def test_unary_fakes_break_the_population_constraint(population: KVData) -> None:
    """PCKV-UE fakes with the targets' pos bits only carry far fewer set bits than a
    genuine report: the keys' sampled shares sum below 0."""
    report = attacked(create("pckv_ue", population.d, 1.0), population, rarest(population, 3), 0.05, False, 2)
    assert report.population_test == "sampled_share"
    assert report.population_score >= ALERT_SCORE


@pytest.mark.parametrize("name", ["pckv_grr", "pckv_ue", "privkv"])
def test_an_onset_is_flagged_by_the_jump(population: KVData, name: str) -> None:
    """An attack that starts inside the newest window flags every target at 1% fakes."""
    targets = rarest(population, 3)
    report = attacked(create(name, population.d, 1.0), population, targets, 0.01, onset=True, seed=3)
    assert np.all(report.key_score[targets] >= ALERT_SCORE)
    assert all(report.key_test[t].startswith(("jump_", "state_")) for t in targets)


def test_pckv_grr_steady_fakes_are_consistent_with_a_population(population: KVData) -> None:
    """The limit, measured: a PCKV-GRR <t, +1> fake is what a holder of +1 sends, and a
    holder's -1 symbol is exactly as likely as a non-holder's (a(1-p) = b/2), so steady
    fakes leave every count possible. Only the jump (or the robust estimator) sees them."""
    mech = create("pckv_grr", population.d, 1.0)
    assert mech.a * (1 - mech.p) == pytest.approx(mech.b / 2)
    targets = rarest(population, 1)
    report = attacked(mech, population, targets, 0.05, onset=False, seed=4)
    assert report.key_score[targets[0]] < ALERT_SCORE


def detection_rate(
    name: str, eps: float, beta: float, r: int, onset: bool, runs: int, users: KVData, kind: str
) -> tuple[float, float]:
    """(share of runs flagging every target, share of runs with any alarm)."""
    mech = create(name, users.d, eps)
    targets = rarest(users, r)
    flagged = alarmed = 0
    for seed in range(runs):
        report = attacked(mech, users, targets, beta, onset, seed, kind)
        flagged += bool(np.all(report.key_score[targets] >= ALERT_SCORE))
        alarmed += report.score >= ALERT_SCORE
    return flagged / runs, alarmed / runs


@pytest.mark.full
def test_detection_table() -> None:
    """The table of docs/detection.md: 100,000 genuine devices of gaussian_pckv, d = 50,
    one and three rare targets, 20 runs per cell; printed, and the onset rows of M2GA
    checked."""
    users = generate("gaussian_pckv", 100_000, 50, seed=1).users
    runs = 20
    rows = [(name, "m2ga", r) for name in ("pckv_grr", "pckv_ue", "privkv", "kvue") for r in (1, 3)]
    rows += [(name, "adaptive", 3) for name in ("pckv_grr", "pckv_ue", "privkv", "kvue")]
    rows += [("pckv_grr", "rkva", 3), ("privkv", "rkva", 3)]
    print("\nmechanism attack eps r situation | beta 0 0.1% 0.5% 1% 5%: targets flagged / any alarm")
    for name, kind, r in rows:
        for eps in (1.0, 4.0):
            for onset in (False, True):
                cells = []
                for beta in (0.0, 0.001, 0.005, 0.01, 0.05):
                    flagged, alarmed = detection_rate(name, eps, beta, r, onset, runs, users, kind)
                    cells.append(f"{flagged:.2f}/{alarmed:.2f}")
                    if beta == 0.0:
                        assert alarmed <= 0.1  # 20 runs at a false-alarm rate <= 0.001
                    if onset and beta >= 0.01 and kind == "m2ga":
                        assert flagged == 1.0, (name, kind, eps, r, beta)
                situation = "onset" if onset else "steady"
                print(f"{name} {kind} {eps:g} {r} {situation} | " + " | ".join(cells), flush=True)
