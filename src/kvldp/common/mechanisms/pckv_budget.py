"""PCKV's privacy budget: the epsilon split, the probabilities it gives, and its guarantees.

Pure functions of (epsilon, ell, d): the allocation of epsilon into a key budget eps1
and a value budget eps2 (Gu et al. 2020, Lemmas 2-3, and the ablations), the perturbation
probabilities (a, b, p) of PCKV-UE and PCKV-GRR, the privacy level each protocol
reaches, and the utility constants (g, h) the allocations optimise (docs/mechanisms.md,
*PCKV budget allocation*). The mechanism classes (:mod:`~kvldp.common.mechanisms.pckv`) configure themselves from these.

Privacy: Theorem 2 (UE) max{eps2, eps1 + ln[2/(1+e^-eps2)]}; Theorem 3 (GRR)
ln[(e^(eps1+eps2) + lambda)/(min{e^eps1, (e^eps2+1)/2} + lambda)], lambda =
(ell-1)(e^eps2+1)/2.
"""

from __future__ import annotations

import math

from kvldp.common.params import InvalidParameter
from kvldp.common.primitives import rr_keep


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        raise InvalidParameter(f"epsilon budget {x!r} is too large for floating point") from None


def allocate(epsilon: float, allocation: str, mechanism: str, ell: int = 1) -> tuple[float, float]:
    """(eps1, eps2) of an allocation.

    ``optimized`` is Gu et al. 2020's Lemma 2 for PCKV-UE and Lemma 3 (which depends on
    ell) for PCKV-GRR; both spend exactly epsilon. ``naive`` and ``nonoptimized`` are the
    paper's ablations, defined for PCKV-UE: naive (sequential composition, as in PrivKVM) spends
    less than epsilon under Theorem 2, nonoptimized exactly epsilon. PCKV-GRR uses the same
    (eps1, eps2) pairs so that ablations compare like with like; Theorem 3 gives exactly
    the PCKV-UE level at ell = 1 and less for ell > 1 (sampling amplification).
    """
    if allocation == "naive":
        return epsilon / 2.0, epsilon / 2.0
    if allocation == "nonoptimized":
        return math.log((_exp(epsilon) + _exp(epsilon / 2.0)) / 2.0), epsilon / 2.0
    if allocation != "optimized":
        raise InvalidParameter(f"unknown allocation {allocation!r}")
    if mechanism == "pckv_ue":
        return math.log((_exp(epsilon) + 1.0) / 2.0), epsilon
    big_d = ell * math.expm1(epsilon)
    return math.log1p(big_d / 2.0), math.log1p(big_d)


def ue_probabilities(eps1: float, eps2: float) -> tuple[float, float, float]:
    """(a, b, p) of PCKV-UE: OUE-style a = 1/2, b = 1/(e^eps1 + 1) (Eq. 19), p = RR(eps2)."""
    return 0.5, 1.0 / (_exp(eps1) + 1.0), rr_keep(eps2)


def grr_probabilities(eps1: float, eps2: float, d_prime: int) -> tuple[float, float, float]:
    """(a, b, p) of PCKV-GRR: GRR over the d' padded keys at eps1, p = RR(eps2)."""
    e1 = _exp(eps1)
    return e1 / (e1 + d_prime - 1), 1.0 / (e1 + d_prime - 1), rr_keep(eps2)


def theorem2_epsilon(eps1: float, eps2: float) -> float:
    """PCKV-UE's tight composition (Theorem 2): max{eps2, eps1 + ln[2/(1 + e^-eps2)]}."""
    return max(eps2, eps1 + math.log(2.0 / (1.0 + math.exp(-eps2))))


def theorem3_epsilon(eps1: float, eps2: float, ell: int) -> float:
    """PCKV-GRR's composition with sampling amplification (Theorem 3)."""
    half = (_exp(eps2) + 1.0) / 2.0
    lam = (ell - 1) * half
    return math.log((_exp(eps1 + eps2) + lam) / (min(_exp(eps1), half) + lam))


def utility_gh(a: float, b: float, p: float) -> tuple[float, float]:
    """Gu et al. 2020, Eq. 16: g = b/(a^2(2p-1)^2) and h = (1-b)b/(a-b)^2, so that MSE_f ~ ell^2 h/n and
    MSE_m ~ mu(g + h m^2) with mu = ell^2/(n f^2)."""
    return b / (a * a * (2 * p - 1) ** 2), (1 - b) * b / (a - b) ** 2


def pckv_ue_gh(epsilon: float) -> tuple[float, float]:
    """(g, h) of PCKV-UE under the optimized allocation, closed form."""
    e = _exp(epsilon)
    return 8 * (e + 1) ** 2 / ((e + 3) * (e - 1) ** 2), 8 * (e + 1) / (e - 1) ** 2


def pckv_grr_gh(epsilon: float, ell: int, d: int) -> tuple[float, float]:
    """(g, h) of PCKV-GRR under the optimized allocation, D = ell(e^eps - 1)."""
    big_d = ell * math.expm1(epsilon)
    d_prime = d + ell
    return 2 * (big_d + 2 * d_prime) / big_d**2, 2 * (big_d + 2 * d_prime - 2) / big_d**2
