"""PCKV's privacy budget (:mod:`kvldp.common.mechanisms.pckv_budget`): the worked numbers of
the probabilities each mechanism configures from its epsilon split, the utility
constants (g, h) against their closed forms and Gu et al. 2020's selection rules, every allocation's
(eps1, eps2), and the privacy levels of Theorems 2 and 3.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.guarantees.privacy_audit import audit
from kvldp.common.mechanisms.pckv import PCKVGRR, PCKVUE
from kvldp.common.mechanisms.pckv_budget import (
    pckv_grr_gh,
    pckv_ue_gh,
    theorem2_epsilon,
    theorem3_epsilon,
    utility_gh,
)


# ---------------------------------------------------------------------- worked numbers (docs/mechanisms.md, *PCKV worked numbers*)
def test_ue_parameters_worked_numbers() -> None:
    mech = PCKVUE(5, 1.0)
    assert mech.a == pytest.approx(0.5, abs=1e-12)
    assert mech.b == pytest.approx(0.3497554090542189, abs=1e-12)
    assert mech.p == pytest.approx(0.7310585786300049, abs=1e-12)
    assert mech.eps1 == pytest.approx(0.6201145069582773, abs=1e-12)
    assert mech.eps2 == pytest.approx(1.0, abs=1e-12)
    assert mech.claimed_epsilon() == pytest.approx(1.0, abs=1e-12)


def test_grr_parameters_worked_numbers() -> None:
    mech = PCKVGRR(10, 1.0, ell=2)
    assert mech.d_prime == 12
    assert mech.a == pytest.approx(0.1981503122949316, abs=1e-12)
    assert mech.b == pytest.approx(0.07289542615500622, abs=1e-12)
    assert mech.p == pytest.approx(0.8160602794142788, abs=1e-12)
    assert mech.eps1 == pytest.approx(1.0, abs=1e-12)
    assert mech.eps2 == pytest.approx(1.4898801256447498, abs=1e-12)
    assert mech.claimed_epsilon() == pytest.approx(1.0, abs=1e-12)
    # optimized GRR is GRR over the 2d' symbols: a(1-p) = b/2
    assert mech.a * (1 - mech.p) == pytest.approx(mech.b / 2, abs=1e-15)
    result = audit(mech)
    assert not result.exhaustive  # 3^10 users are out of reach; the reduced model is exact
    assert result.max_log_ratio == pytest.approx(1.0, abs=1e-9)
    assert result.tight and result.ok


def test_gh_worked_numbers() -> None:
    g, h = pckv_ue_gh(1.0)
    assert g == pytest.approx(6.551190748977905, rel=1e-12)
    assert h == pytest.approx(10.074963852370066, rel=1e-12)
    g, h = pckv_ue_gh(2.0)
    assert g == pytest.approx(1.3275983069482271, rel=1e-12)
    assert h == pytest.approx(1.6441055018679167, rel=1e-12)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
@pytest.mark.parametrize(("ell", "d"), [(1, 10), (2, 10), (5, 100)])
def test_gh_closed_forms_match_probabilities(eps: float, ell: int, d: int) -> None:
    """The closed forms equal g, h computed from each mechanism's own (a, b, p)."""
    np.testing.assert_allclose(pckv_ue_gh(eps), PCKVUE(d, eps, ell=ell).utility(), rtol=1e-12)
    np.testing.assert_allclose(pckv_grr_gh(eps, ell, d), PCKVGRR(d, eps, ell=ell).utility(), rtol=1e-12)
    assert utility_gh(0.5, 0.25, 0.75) == pytest.approx((0.25 / 0.0625, 0.75 * 0.25 / 0.0625))


@pytest.mark.parametrize("eps", [0.3, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("ell", [1, 2, 4])
@pytest.mark.parametrize("d", [3, 20, 200, 5000])
def test_gh_agree_with_d4_selection_rules(eps: float, ell: int, d: int) -> None:
    """Gu et al. 2020: UE has the smaller h iff 2(d-1) > ell(4ell-1)(e^eps+1); the smaller g iff
    2d > ell[4ell(e^eps+1)/(e^eps+3) - 1](e^eps+1)."""
    e = math.exp(eps)
    g_ue, h_ue = pckv_ue_gh(eps)
    g_grr, h_grr = pckv_grr_gh(eps, ell, d)
    assert (h_ue < h_grr) == (2 * (d - 1) > ell * (4 * ell - 1) * (e + 1))
    assert (g_ue < g_grr) == (2 * d > ell * (4 * ell * (e + 1) / (e + 3) - 1) * (e + 1))


# ---------------------------------------------------------------------- allocations
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_allocations(eps: float) -> None:
    """Gu et al. 2020, Eq. 19-23: every allocation's (a, b, p) matches its (eps1, eps2)."""
    for alloc, eps1, eps2 in (
        ("naive", eps / 2, eps / 2),
        ("nonoptimized", math.log((math.exp(eps) + math.exp(eps / 2)) / 2), eps / 2),
        ("optimized", math.log((math.exp(eps) + 1) / 2), eps),
    ):
        ue = PCKVUE(7, eps, allocation=alloc)
        assert (ue.eps1, ue.eps2) == pytest.approx((eps1, eps2), abs=1e-12)
        a, b = ue.client_a, ue.client_b
        assert math.log(a * (1 - b) / (b * (1 - a))) == pytest.approx(eps1, abs=1e-12)
        assert math.log(ue.p / (1 - ue.p)) == pytest.approx(eps2, abs=1e-12)
    grr = PCKVGRR(7, eps, ell=3)
    big_d = 3 * math.expm1(eps)
    assert grr.a == pytest.approx((big_d + 2) / (big_d + 20), rel=1e-12)
    assert grr.b == pytest.approx(2 / (big_d + 20), rel=1e-12)
    assert grr.p == pytest.approx((big_d + 1) / (big_d + 2), rel=1e-12)
    assert grr.b == pytest.approx((1 - grr.a) / (grr.d_prime - 1), rel=1e-12)


# ---------------------------------------------------------------------- privacy
def test_theorem_functions() -> None:
    # Theorem 3 at ell = 1 with the optimized split equals Theorem 2's value eps
    eps = 1.3
    eps1, eps2 = math.log((math.exp(eps) + 1) / 2), eps
    assert theorem2_epsilon(eps1, eps2) == pytest.approx(eps, abs=1e-12)
    assert theorem3_epsilon(eps1, eps2, 1) == pytest.approx(eps, abs=1e-12)
    # sampling amplification: the same split costs less with a larger ell
    assert theorem3_epsilon(eps1, eps2, 3) < theorem3_epsilon(eps1, eps2, 2) < eps
