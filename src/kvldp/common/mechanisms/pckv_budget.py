"""PCKV's privacy budget: the epsilon split, the probabilities it gives, and its guarantees.

Pure functions of (epsilon, ell, d): the allocation of epsilon into a key budget eps1
and a value budget eps2 (Gu et al. 2020, Lemmas 2-3, and the ablations), the perturbation
probabilities (a, b, p) of PCKV-UE and PCKV-GRR, the privacy level each protocol
reaches, and the utility constants (g, h) the allocations optimise (docs/mechanisms.md,
*PCKV budget allocation*). The mechanism classes (:mod:`~kvldp.common.mechanisms.pckv`) configure themselves from these.

Privacy: Theorem 2 (UE) max{eps2, eps1 + ln[2/(1+e^-eps2)]}; Theorem 3 (GRR)
ln[(e^(eps1+eps2) + lambda)/(min{e^eps1, (e^eps2+1)/2} + lambda)], lambda =
(ell-1)(e^eps2+1)/2. The exact level for any probabilities (a, b, p), which an
instantaneous randomization moves (:func:`composed_probabilities`), is :func:`ue_level`
and :func:`grr_level` (docs/mechanisms.md, *Instantaneous randomization*).
"""

from __future__ import annotations

import math

import numpy as np

from kvldp.common.primitives import rr_keep
from kvldp.common.spec.params import InvalidParameter


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


def composed_probabilities(
    a: float, b: float, p: float, size: int, contrast: float
) -> tuple[float, float, float]:
    """(a*, b*, p*) after a randomizer that keeps each value of a coordinate with contrast
    lambda over ``size`` values (PCKV-UE: a key's +1, -1 or 0, size 3; PCKV-GRR: a (key,
    sign) symbol, size 2d + 1): every probability P of a value becomes q1 + lambda P,
    q1 = (1 - lambda)/size, so a* = 2 q1 + lambda a, b* = 2 q1 + lambda b and
    a* p* = q1 + lambda a p."""
    other = (1.0 - contrast) / size
    a_star = 2.0 * other + contrast * a
    return a_star, 2.0 * other + contrast * b, (other + contrast * a * p) / a_star


def ue_level(a: float, b: float, p: float, ell: int, d: int) -> float:
    """The exact privacy level of PCKV-UE with probabilities (a, b, p) over d keys.

    A device holding S (at most ell pairs; larger sets average their keys) emits y with
    probability Q(y) (1 + sum_{k in S} g_k(y) / ell), Q the law of a device that sampled a
    dummy and g_k the relative gain of sampling k at its coordinate: G+ = 2ap/b - 1 where
    y_k is S's sign, G- = 2a(1-p)/b - 1 where it is the other sign, G0 = (1-a)/(1-b) - 1
    where y_k = 0. For an output with r non-zero coordinates the likeliest device takes G+
    on min(r, ell) of them, the least likely the ell most negative of G- (r of them) and
    G0 (d - r); the level is the largest log ratio over r. With a = 1/2 and d >= 2 ell it
    is Theorem 2."""
    up = 2 * a * p / b - 1
    down = 2 * a * (1 - p) / b - 1
    zero = (1 - a) / (1 - b) - 1
    r = np.arange(d + 1)
    numerator = 1 + np.minimum(r, ell) * up / ell
    if down < zero:
        low_n = np.minimum(r, ell)
        zero_n = np.minimum(d - r, ell - low_n)
    else:
        zero_n = np.minimum(d - r, ell)
        low_n = np.where(down < 0, np.minimum(r, ell - zero_n), 0)
    denominator = 1 + (low_n * min(down, 0.0) + zero_n * zero) / ell
    return float(np.max(np.log(numerator / denominator)))


def grr_level(a: float, b: float, p: float, ell: int, d: int, deficit: float = 0.0) -> float:
    """The exact privacy level of PCKV-GRR with probabilities (a, b, p) over d keys, its
    dummy output ``deficit`` below ell b (after a real sample) and a + (ell - 1) b (after a
    dummy one).

    A device holding S (at most ell pairs) emits (k, s) with probability
    b/2 + [k in S](a p or a (1 - p) - b/2)/ell, so a real output's largest ratio is
    (ell b/2 + a p - b/2)/(ell b/2 + min(0, a (1 - p) - b/2)) (Theorem 3); the dummy output
    has probability D_d = a + (ell - 1) b - deficit for the empty set and
    D_r m/ell + D_d (1 - m/ell) for a set of m = min(d, ell) keys, D_r = ell b - deficit."""
    real = (ell * b / 2 + a * p - b / 2) / (ell * b / 2 + min(0.0, a * (1 - p) - b / 2))
    held = min(d, ell) / ell
    after_dummy, after_real = a + (ell - 1) * b - deficit, ell * b - deficit
    dummy = after_dummy / (after_real * held + after_dummy * (1 - held))
    return math.log(max(real, dummy))


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
