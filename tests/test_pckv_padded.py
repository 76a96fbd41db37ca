"""PCKV's padded share (:mod:`kvldp.common.mechanisms.pckv_padded`): exact on expected
counts, within 4 standard errors on simulated reports, its standard error against the
spread over repeats, and what it says about devices holding ell pairs or more."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms.padding import slot_weights
from kvldp.common.mechanisms.pckv import PCKV

from support.pckv import MECHS, population

D = 8
#: devices holding 0, 1, 2, 3 and 5 pairs: at ell = 3 they pad w.p. 1, 2/3, 1/3, 0 and 0
MIXED = [
    (1, {}),
    (2, {4: 0.5}),
    (3, {0: -1.0, 2: 0.3}),
    (2, {1: 1.0, 3: -0.2, 7: 0.9}),
    (2, dict.fromkeys(range(5), 0.1)),
]


def true_share(users: KVData, ell: int) -> float:
    """Mean over devices of Pr[the device samples a padding slot]."""
    return float(slot_weights(users, ell)[1].mean())


def folded(mech: PCKV, users: KVData, seed: int) -> Stats:
    return Stats(mech).fold(mech.perturb_many(users, np.random.default_rng(seed)))


@pytest.mark.parametrize("cls", MECHS, ids=lambda c: c.name)
@pytest.mark.parametrize("ell", [1, 3, 6])
def test_exact_on_expected_counts(cls: type[PCKV], ell: int) -> None:
    """On the expected statistics the estimate is the true padded share, truncated devices included."""
    users = population(D, [(count * 10, pairs) for count, pairs in MIXED])
    mech = cls(D, 1.5, ell=ell)
    share = mech.padded_share(mech.expected_stats(users))
    assert share.estimate == pytest.approx(true_share(users, ell), abs=1e-12)
    assert share.n_reports == users.n_users


@pytest.mark.parametrize("cls", MECHS, ids=lambda c: c.name)
def test_unbiased_within_four_stderr(cls: type[PCKV]) -> None:
    users = population(D, [(count * 20_000, pairs) for count, pairs in MIXED])
    mech = cls(D, 2.0, ell=3)
    share = mech.padded_share(folded(mech, users, 5))
    truth = true_share(users, 3)
    assert 0.3 < truth < 0.4
    assert abs(share.estimate - truth) <= 4 * share.stderr
    assert share.stderr < 0.01


@pytest.mark.parametrize("cls", MECHS, ids=lambda c: c.name)
@pytest.mark.parametrize("homogeneous", [True, False], ids=["alike", "mixed"])
def test_stderr_matches_spread(cls: type[PCKV], homogeneous: bool) -> None:
    """Over 1,000 collections of 500 devices the estimates' variance is the analytic one
    where every device pads alike, and at most it otherwise (the bound). The sample
    variance of R normal draws has relative sd sqrt(2/(R-1)), about 4.5%: 4 of those is
    the tolerance. At epsilon = 6 the spread of the devices' padding, pi (1 - pi)(a - b)^2,
    is about a third of the variance, so a formula without it fails."""
    repeats, size, ell = 1_000, 500, 3
    groups = [(size, {2: 0.5})] if homogeneous else [(count * size // 10, pairs) for count, pairs in MIXED]
    users = population(D, groups)
    mech = cls(D, 6.0, ell=ell)
    batch = mech.perturb_many(
        population(D, [(repeats * count, pairs) for count, pairs in groups]), np.random.default_rng(9)
    )
    # repeat r is every repeats-th row from r: each holds the population once
    estimates = np.array(
        [
            mech.padded_share(Stats(mech).fold({k: v[r::repeats] for k, v in batch.items()})).estimate
            for r in range(repeats)
        ]
    )
    exact_pi = mech.padded_share(mech.expected_stats(users))
    predicted = mech.padded_share(folded(mech, users, 3)).stderr ** 2
    tolerance = 4 * math.sqrt(2 / (repeats - 1))
    ratio = float(np.var(estimates, ddof=1)) / predicted
    assert abs(float(np.mean(estimates)) - exact_pi.estimate) <= 4 * math.sqrt(predicted / repeats)
    if homogeneous:
        assert abs(ratio - 1) <= tolerance
    else:
        assert ratio <= 1 + tolerance


@pytest.mark.parametrize("cls", MECHS, ids=lambda c: c.name)
def test_truncation_leaves_no_padding(cls: type[PCKV]) -> None:
    """Every device holding more than ell pairs: the padded share is indistinguishable from 0
    and the bound on devices holding ell or more says all of them may."""
    users = population(D, [(50_000, {0: 0.2, 3: -0.5, 6: 0.9})])
    mech = cls(D, 2.0, ell=2)
    share = mech.padded_share(folded(mech, users, 11))
    assert abs(share.estimate) <= 4 * share.stderr
    assert share.unpadded_upper == 1.0


@pytest.mark.parametrize("cls", MECHS, ids=lambda c: c.name)
def test_padding_bounds_the_unpadded_devices(cls: type[PCKV]) -> None:
    """Half the devices hold ell pairs, half none: the padded share is 1/2 and the upper
    bound on devices holding ell or more lies between the truth and 1."""
    users = population(D, [(40_000, {1: 0.1, 5: 0.4}), (40_000, {})])
    mech = cls(D, 2.0, ell=2)
    share = mech.padded_share(folded(mech, users, 13))
    assert abs(share.estimate - 0.5) <= 4 * share.stderr
    assert 0.5 <= share.unpadded_upper < 0.6


def test_no_reports() -> None:
    mech = MECHS[0](D, 1.0, ell=2)
    share = mech.padded_share(Stats(mech))
    assert math.isnan(share.estimate)
    assert math.isnan(share.stderr)
    assert math.isnan(share.unpadded_upper)
    assert share.n_reports == 0
