"""The parts of the change-time study (kvldp.evaluation.change_detection) on inputs whose
answers are known: the randomized coordinates read back from every kind of output, the
oracle's likelihood ratio, the bound every test obeys, and state pairs that differ."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.mechanisms import create
from kvldp.evaluation.change_detection import (
    changed_state_pairs,
    coordinates,
    detection_bound,
    memoized_pair,
    oracle_llr,
    payloads_equal,
    streams,
)
from kvldp.sim import datasets

N = 20_000


@pytest.mark.parametrize("name", ["grr", "oue", "kvoh", "pckv_ue", "privkv"])
def test_a_coordinate_is_kept_at_the_randomizers_rate(name: str) -> None:
    """Randomizing one memoized report N times and reading its coordinates back: each is
    kept with probability p_I (4 binomial standard errors over N x C draws)."""
    mech = create(name, 6, 4.0)
    randomizer = mech.instantaneous(1.0)
    users = datasets.generate("gaussian", 1, 6, 3).users
    report = mech.perturb_many(users, np.random.default_rng(1))
    z = coordinates(randomizer.output, report)
    assert z.shape == (1, randomizer.output.coords) and np.all((z >= 0) & (z < randomizer.output.size))
    many = {field: np.repeat(column, N, axis=0) for field, column in report.items()}
    y = coordinates(randomizer.output, randomizer.randomize(many, np.random.default_rng(2)))
    kept = float(np.mean(y == z))
    tolerance = 4 * math.sqrt(randomizer.keep * (1 - randomizer.keep) / y.size)
    assert abs(kept - randomizer.keep) <= tolerance


def test_the_oracle_scores_only_the_coordinates_that_changed() -> None:
    """Two memoized reports differing in one bit: a stream that shows the new bit from
    split tau on scores ln(p_I/q_I) per send after each split that precedes it."""
    randomizer = create("oue", 4, 4.0).instantaneous(1.0)
    old = np.array([[1, 0, 0, 0, 0]])
    new = np.array([[0, 0, 0, 0, 0]])
    y = np.repeat(old[:, None, :], 4, axis=1)
    y[0, 2:, 0] = 0  # the last two sends show the new bit
    llr = oracle_llr(randomizer, y, old, new)
    ratio = math.log(randomizer.keep / randomizer.other)
    # split 1: send 1 shows the old bit (-1), sends 2 and 3 the new (+2); split 2: +2; split 3: +1
    assert llr[0] == pytest.approx([ratio, 2 * ratio, ratio])
    assert np.all(oracle_llr(randomizer, y, old, old) == 0.0)


def test_the_bound_every_test_obeys() -> None:
    assert detection_bound(np.zeros(10), 0.05) == pytest.approx(0.05)
    level = 1.5
    alone = min(math.exp(level) * 0.05, 1 - math.exp(-level) * 0.95)
    assert detection_bound(np.full(7, level), 0.05) == pytest.approx(alone)
    # one device of two cannot be told apart: the best test spends its false positives on the
    # other up to its knee F = 1/(e^3 + 1) (detecting it with e^3 F), the rest on the first (slope 1)
    mixed = detection_bound(np.array([0.0, 3.0]), 0.05)
    knee = 1 / (math.exp(3.0) + 1)
    assert mixed == pytest.approx(0.5 * math.exp(3.0) * knee + (0.05 - 0.5 * knee))
    assert detection_bound(np.full(3, 50.0), 0.05) == 1.0
    assert detection_bound(np.array([0.0, 5_000.0]), 0.05) == pytest.approx(0.5 + 0.05)


def test_state_pairs_differ_and_share_public_fields_when_permanent() -> None:
    population = datasets.generate("gaussian", 2_000, 8, 1).users
    mech = create("kvue", 8, 4.0)
    old, new = changed_state_pairs(population, 500, True, np.random.default_rng(4))
    held_old, val_old = old.to_dense()
    held_new, val_new = new.to_dense()
    assert old.n_users == new.n_users == 500
    assert np.all(np.any((held_old != held_new) | (held_old & (val_old != val_new)), axis=1))
    assert set(np.unique(old.values)) <= {-1.0, 1.0}
    first, second = memoized_pair(mech, old, new, True, 5)
    for field in mech.public_fields():
        assert np.array_equal(first[field], second[field])
    first, second = memoized_pair(mech, old, new, False, 5)
    assert not all(np.array_equal(first[f], second[f]) for f in mech.public_fields())


def test_streams_switch_at_their_change() -> None:
    """With a randomizer that keeps almost everything, a changed stream is z before its
    change and z' from it on (the change uniform over sends 1 .. 2m - 1); an unchanged one
    is z throughout."""
    mech = create("grr", 6, 8.0)
    randomizer = mech.instantaneous(7.999)
    users = KVData.from_pairs(6, [{0: 1.0}, {1: 1.0}])
    old = mech.perturb_many(users.take(np.zeros(400, dtype=np.int64)), np.random.default_rng(0))
    new = mech.perturb_many(users.take(np.ones(400, dtype=np.int64)), np.random.default_rng(1))
    kept = ~payloads_equal(old, new)
    s = streams(randomizer, old, new, 3, np.random.default_rng(1))
    assert s.changed.shape == (400, 6, 1) and set(np.unique(s.change)) == {1, 2, 3, 4, 5}
    after = np.arange(6)[None, :] >= s.change[:, None]
    expected = np.where(after, s.new[:, :1], s.old[:, :1])
    assert np.mean(s.changed[kept, :, 0] == expected[kept]) > 0.999
    assert np.mean(s.unchanged[:, :, 0] == s.old[:, :1]) > 0.999
