"""The low-order Hadamard joint-state mechanism and IOH with OUE bits (docs/mechanisms.md,
*Low-order Hadamard responses*, *IOH with OUE bits*)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.estimation.conditional import ConditionalQuery, InvalidQuery, conditional_truth, parse_query
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.ioh_hrr import IOHHRR, coefficient_set, digit_weights
from kvldp.sim.datasets import generate


@pytest.mark.parametrize(("d", "size"), [(2, 16), (3, 37), (4, 67), (8, 277), (10, 436)])
def test_coefficient_set_sizes(d: int, size: int) -> None:
    assert coefficient_set(d, 2).shape[0] == size == sum(math.comb(d, ell) * 3**ell for ell in range(3))
    mech = create("ioh_hrr", d, 1.0)
    assert isinstance(mech, IOHHRR) and mech.k == size - 1  # j = 0 is never sent
    assert math.ceil(math.log2(mech.k)) + 1 <= 10  # the "~10-bit report"


def test_digit_weights_are_the_hadamard_transform_of_the_state_set() -> None:
    np.testing.assert_array_equal(digit_weights((0, 2)), [2, 2, 0, 0])  # present
    np.testing.assert_array_equal(digit_weights((1,)), [1, -1, 1, -1])  # absent
    np.testing.assert_array_equal(digit_weights((0, 1, 2)), [3, 1, 1, -1])  # free (code 3 unused)


def test_variance_below_the_approximation_that_keeps_j_0() -> None:
    """d = 4, L = 2, eps = 1, n = 2e4, "keys 0 and 1 present". The approximate formula
    n c^2 |T_L| prod|T_i| / 4^|Q| (1.57e6) keeps j = 0 among the sampled coefficients; kvldp
    never sends j = 0 (Phi(0) = n is known), which removes its share:
    n K c^2 (prod 4|T_i| - prod |T_i|^2) / 16^|Q| minus the population term. Monte Carlo
    (R = 600) decides."""
    mech = create("ioh_hrr", 4, 1.0)
    assert isinstance(mech, IOHHRR)
    n = 20_000
    users = generate("conditional", n, 4, seed=4).users
    both = ConditionalQuery.build(4, 1, {0: 1}).sets().numerator  # keys 0 and 1 present
    sums = mech.cell_sums(mech.expected_stats(users), [[both]], "unbiased")[0]
    variance = float(sums.covariance[0, 0])
    count = float(sums.estimates[0])
    r = 4 / 16  # prod |T_i| / 4^|Q|
    noise = n * mech.k * mech.c**2 * (4 * 2 * 4 * 2 - 2**2 * 2**2) / 16**2
    population = count * (1 - r) ** 2 + (n - count) * r**2
    assert variance == pytest.approx(noise - population, rel=1e-12)
    assert variance < n * mech.c**2 * (mech.k + 1) * r  # below the approximation
    rng = np.random.default_rng(5)
    draws = [
        mech.cell_sums(mech.collect(users, rng), [[both]], "unbiased")[0].estimates[0] for _ in range(600)
    ]
    assert abs(np.var(draws, ddof=1) / variance - 1) < 4 * math.sqrt(2 / 600)


def test_queries_over_more_than_the_order_are_refused() -> None:
    mech = create("ioh_hrr", 4, 1.0, order=2)
    stats = mech.new_stats()
    names = ["a", "b", "c", "d"]
    with pytest.raises(InvalidQuery, match="touches 3 keys but ioh_hrr with order 2"):
        mech.conditional(stats, parse_query("a | b=1, c=0", names))  # type: ignore[attr-defined]
    wider = create("ioh_hrr", 4, 1.0, order=3)
    users = generate("conditional", 5_000, 4, seed=6).users
    query = parse_query("a | b=1, c=0", names)
    answer = wider.conditional(wider.expected_stats(users), query)  # type: ignore[attr-defined]
    assert answer.frequency == pytest.approx(conditional_truth(users, query)[0], abs=1e-9)
    assert create("ioh_hrr", 1, 1.0).order == 1  # clamped to d


@pytest.mark.parametrize("name", ["ioh", "ioh_oue", "ioh_hrr"])
def test_one_interface_for_all_three(name: str) -> None:
    """The same parsed query, the same call, the truth recovered from expected statistics."""
    users = generate("conditional", 8_000, 3, seed=7).users
    query = parse_query("k2 | k0=1, k1=0", ["k0", "k1", "k2"])
    mech = create(name, 3, 2.0, **({"order": 3} if name == "ioh_hrr" else {}))
    answer = mech.conditional(mech.expected_stats(users), query)  # type: ignore[attr-defined]
    f, m = conditional_truth(users, query)
    assert answer.frequency == pytest.approx(f, abs=1e-9) and answer.mean == pytest.approx(m, abs=1e-9)


def test_oue_probabilities() -> None:
    mech = create("ioh_oue", 3, 1.0)
    assert (mech.p, mech.q) == pytest.approx((0.5, 1 / (math.e + 1)))  # type: ignore[attr-defined]
